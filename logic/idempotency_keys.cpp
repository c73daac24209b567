#include "logic/idempotency_keys.hpp"

#include "core/time_range.hpp"

namespace dally::logic {

core::result<std::optional<core::task_id>>
idempotency_keys::lookup(const std::string& key, uint64_t digest,
                         int64_t now_ms) const {
  std::optional<storage::idempotency_entry> known;
  if (auto it = staged_.find(key); it != staged_.end()) {
    known = it->second;
  } else {
    auto found = store_.find_key(key, now_ms);
    if (!found)
      return found.err();
    known = *found;
  }
  if (!known)
    return std::optional<core::task_id>{};
  if (known->digest != digest)
    return core::error{core::errc::idempotency_conflict,
                       "the idempotency key names task " +
                         std::to_string(known->task_id) +
                         ", scheduled with another topic or payload"};
  return std::optional<core::task_id>{known->task_id};
}

void idempotency_keys::stage(const std::string& key, core::task_id id,
                             uint64_t digest, int64_t now_ms,
                             staged_batch& batch) {
  storage::idempotency_entry entry{
    id, core::saturating_add(now_ms, retention_ms_), digest};
  staged_.insert_or_assign(key, entry);
  batch.put_key(key, entry);
}

core::error idempotency_keys::expire(int64_t now_ms, size_t limit) {
  auto expired = store_.expire_keys(now_ms, limit);
  return expired ? core::error{} : expired.err();
}

} // namespace dally::logic
