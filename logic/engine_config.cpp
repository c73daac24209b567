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

const core::task_lifecycle& lifecycle_of(const shard_options& opts) noexcept {
  return opts.lifecycle ? *opts.lifecycle : core::task_lifecycle::standard();
}

} // namespace dally::logic
