#include "logic/engine_config.hpp"

#include <utility>

#include "storage/rocks_task_store.hpp"

namespace dally::logic {

core::result<std::unique_ptr<storage::task_store>>
open_shard_store(const store_opener& open, const storage::store_options& opts) {
  if (open)
    return open(opts);
  auto opened = storage::rocks_task_store::open(opts);
  if (!opened)
    return opened.err();
  return std::unique_ptr<storage::task_store>{std::move(*opened)};
}

shard_options shard_options_of(const engine_config& cfg) {
  auto out = cfg.shard;
  if (out.max_unanswered_per_topic == 0 && cfg.max_unanswered_per_topic > 0 &&
      cfg.shard_count > 0)
    out.max_unanswered_per_topic =
      (cfg.max_unanswered_per_topic + cfg.shard_count - 1) / cfg.shard_count;
  return out;
}

const core::task_lifecycle& lifecycle_of(const shard_options& opts) noexcept {
  return opts.lifecycle ? *opts.lifecycle : core::task_lifecycle::standard();
}

} // namespace dally::logic
