#pragma once

#include <cstdint>

namespace dally::core {

/// A task id. Ids are unique per cluster; `id % shard_count` is the shard.
using task_id = uint64_t;

/// What a timer structure hands back when an entry comes due.
struct timer_entry {
  task_id id = 0;
  int64_t due_ms = 0;

  friend bool operator==(const timer_entry&, const timer_entry&) = default;
};

} // namespace dally::core
