#pragma once

#include <cstddef>
#include <memory>

#include <absl/container/flat_hash_map.h>

#include "core/cron_expression.hpp"
#include "core/task_record.hpp"
#include "core/timer_entry.hpp"

namespace dally::logic {

/// Committed records a shard will soon need, in memory: those of in-flight
/// tasks (an ack, nack, touch or lease expiry then reads nothing) and of
/// tasks due soon (firing them reads nothing), up to a budget of bytes.
/// The shard updates or drops the entry of every task a commit writes, so
/// a cached record is always the committed one.
///
/// Records live in allocations of their own: a table of them inline (256
/// bytes a slot) faulted in megabytes of fresh pages at every doubling and
/// moved every record at every rehash, and a commit stalled for tens of ms
/// each time the cache grew or shrank (docs/benchmarks.md). The slots hold
/// the ids, so a lookup touches a record only to use it, and `prefetch`
/// can start a batch's record loads together.
class record_cache {
public:
  explicit record_cache(size_t budget_bytes) : budget_bytes_(budget_bytes) {}

  /// Hands the cached record of `id` to `sink` (as an rvalue) and drops it
  /// from the cache, for a caller about to change it (its commit caches
  /// the result). False if it is not cached.
  template<class Sink>
  bool take(core::task_id id, Sink&& sink) {
    auto it = cached_.find(id);
    if (it == cached_.end())
      return false;
    bytes_ -= footprint(*it->second);
    sink(std::move(*it->second));
    cached_.erase(it);
    return true;
  }

  /// The cached record of `id`, or null. Valid until the cache changes.
  const core::task_record* find(core::task_id id) const {
    auto it = cached_.find(id);
    return it == cached_.end() ? nullptr : it->second.get();
  }

  bool contains(core::task_id id) const { return cached_.contains(id); }

  /// Caches the committed `rec` (the last one of its task wins), if it
  /// fits the budget; a task whose new record does not fit is dropped.
  void remember(core::task_record&& rec);

  /// remember() of a task the cache does not hold.
  void remember_new(core::task_record&& rec);

  void forget(core::task_id id);

  /// The table keeps its slot array after erases: once it is mostly empty
  /// (a burst has passed), it is rebuilt to fit, so an idle shard gives the
  /// memory back. The rebuild moves pointers, not records.
  void shrink();

  /// Loads the cached records of the tasks in `ids` (their ids through
  /// `id_of`) into the CPU's caches: first the table's slots of all of
  /// them, then the records, so that their misses overlap. A shard's cache
  /// holds tens of thousands of records, and a fire or a batch of verdicts
  /// visits them in an order unrelated to their addresses.
  template<class Range, class IdOf>
  void prefetch(const Range& ids, IdOf id_of) const {
    if (cached_.empty())
      return;
    for (const auto& x : ids)
      cached_.prefetch(id_of(x));
    for (const auto& x : ids) {
      auto it = cached_.find(id_of(x));
      if (it == cached_.end())
        continue;
      const auto* bytes = reinterpret_cast<const char*>(it->second.get());
      for (size_t i = 0; i < sizeof(core::task_record); i += 64)
        __builtin_prefetch(bytes + i);
    }
  }

  /// Records cached.
  size_t size() const noexcept { return cached_.size(); }

  /// Slots of the table.
  size_t slots() const noexcept { return cached_.capacity(); }

  /// What the cached records count against the budget.
  size_t bytes() const noexcept { return bytes_; }

  /// What a cached record counts against the budget (about): its size,
  /// its strings and its share of the table.
  static size_t footprint(const core::task_record& rec) {
    const auto& t = rec.task;
    const auto& r = t.recurrence;
    return sizeof(core::task_record) + entry_overhead + t.topic.size() +
           t.payload.size() +
           (t.idempotency_key ? t.idempotency_key->size() : 0) +
           r.intervals_ms().size() * sizeof(int64_t) +
           (r.cron_expr() != nullptr ? cron_overhead : 0);
  }

private:
  /// A record's allocation rounded up to the allocator's size class, and
  /// the table's slot (id and pointer, 16 bytes), which grows by doubling
  /// at 7/8 full, so a used slot comes with about half a free one, plus
  /// control bytes.
  static constexpr size_t entry_overhead = 64 + 24;
  /// A parsed cron expression's tables and strings, about.
  static constexpr size_t cron_overhead = sizeof(core::cron_expression) + 64;

  size_t budget_bytes_;
  absl::flat_hash_map<core::task_id, std::unique_ptr<core::task_record>>
    cached_;
  size_t bytes_ = 0;
};

} // namespace dally::logic
