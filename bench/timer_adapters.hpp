#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <queue>
#include <string_view>
#include <utility>
#include <vector>

#include <absl/container/flat_hash_map.h>
#include <boost/heap/d_ary_heap.hpp>

#include "core/quad_heap.hpp"
#include "core/timer_entry.hpp"
#include "core/timing_wheel.hpp"

/// Adapters that give every timer structure under benchmark the same
/// operations, keyed by a task id with a due time in UTC ms:
///
///     insert(id, due_ms) -> bool     erase(id) -> bool
///     update(id, due_ms) -> bool     next_due() -> optional<int64_t>
///     pop_due(now_ms, limit, out) -> size_t          size() -> size_t
///
/// plus `name` and `compacts_garbage` (whether erase and update leave
/// garbage behind that an occasional O(n) pass removes).
///
/// Every adapter is constructed from the start of its time line (only the
/// timing wheel uses it) and follows quad_heap's contract: insert of a
/// present id and erase/update of an absent id return false and change
/// nothing; pop_due appends entries with `due_ms <= now_ms` in due order.
namespace dally::bench {

using core::task_id;
using core::timer_entry;

/// The structure the shards use, unchanged.
class quad_heap_adapter {
public:
  static constexpr std::string_view name = "quad_heap";
  static constexpr bool compacts_garbage = false;

  explicit quad_heap_adapter(int64_t) {}

  bool insert(task_id id, int64_t due_ms) { return heap_.insert(id, due_ms); }

  bool erase(task_id id) { return heap_.erase(id); }

  bool update(task_id id, int64_t due_ms) { return heap_.update(id, due_ms); }

  std::optional<int64_t> next_due() const { return heap_.next_due(); }

  size_t pop_due(int64_t now_ms, size_t limit, std::vector<timer_entry>& out) {
    return heap_.pop_due(now_ms, limit, out);
  }

  size_t size() const { return heap_.size(); }

  /// What the structure itself says it allocates.
  size_t memory_bytes() const { return heap_.memory_bytes(); }

private:
  core::quad_heap heap_;
};

/// The hierarchical timing wheel, 1 ms ticks, 64 slots per level.
class timing_wheel_adapter {
public:
  static constexpr std::string_view name = "timing_wheel";
  static constexpr bool compacts_garbage = false;

  explicit timing_wheel_adapter(int64_t start_ms)
    : wheel_(core::timing_wheel_options{
        .tick_ms = 1, .wheel_size = 64, .start_ms = start_ms}) {}

  bool insert(task_id id, int64_t due_ms) { return wheel_.insert(id, due_ms); }

  bool erase(task_id id) { return wheel_.erase(id); }

  bool update(task_id id, int64_t due_ms) { return wheel_.update(id, due_ms); }

  std::optional<int64_t> next_due() const { return wheel_.next_due(); }

  size_t pop_due(int64_t now_ms, size_t limit, std::vector<timer_entry>& out) {
    return wheel_.pop_due(now_ms, limit, out);
  }

  size_t size() const { return wheel_.size(); }

  /// What the structure itself says it allocates.
  size_t memory_bytes() const { return wheel_.memory_bytes(); }

private:
  core::timing_wheel wheel_;
};

/// One element of the two baselines: ordered by (due, seq), where seq is
/// the insertion sequence, so equal due times pop in insertion order.
struct seq_item {
  int64_t due_ms;
  uint64_t seq;
  task_id id;
};

/// "x comes after y": std::priority_queue and boost::heap both keep the
/// greatest element under their comparator on top, so this comparator puts
/// the earliest item there.
struct comes_after {
  bool operator()(const seq_item& x, const seq_item& y) const noexcept {
    return x.due_ms != y.due_ms ? x.due_ms > y.due_ms : x.seq > y.seq;
  }
};

/// std::priority_queue (a binary heap) with cancel by lazy deletion.
///
/// `live_` maps every pending id to the sequence number of its one live
/// item; any other item of that id in the queue is stale. Erase only drops
/// the map entry, update pushes a new item and repoints the map, and
/// popping skips stale items. When stale items outnumber live ones, the
/// queue is compacted in O(n), which keeps it at most twice the live size
/// and costs O(1) amortized per erase or update.
class lazy_priority_queue_adapter {
public:
  static constexpr std::string_view name = "std_priority_queue";
  /// Erase and update leave garbage that an O(n) compaction removes.
  static constexpr bool compacts_garbage = true;

  explicit lazy_priority_queue_adapter(int64_t) {}

  bool insert(task_id id, int64_t due_ms) {
    auto [it, fresh] = live_.try_emplace(id, seq_);
    if (!fresh)
      return false;
    queue_.push(seq_item{due_ms, seq_++, id});
    return true;
  }

  bool erase(task_id id) {
    auto it = live_.find(id);
    if (it == live_.end())
      return false;
    live_.erase(it);
    compact_if_stale();
    return true;
  }

  bool update(task_id id, int64_t due_ms) {
    auto it = live_.find(id);
    if (it == live_.end())
      return false;
    it->second = seq_;
    queue_.push(seq_item{due_ms, seq_++, id});
    compact_if_stale();
    return true;
  }

  std::optional<int64_t> next_due() {
    if (drop_stale_top() == live_.end())
      return std::nullopt;
    return queue_.top().due_ms;
  }

  size_t pop_due(int64_t now_ms, size_t limit, std::vector<timer_entry>& out) {
    size_t n = 0;
    while (n < limit) {
      auto it = drop_stale_top();
      if (it == live_.end() || queue_.top().due_ms > now_ms)
        break;
      out.push_back(timer_entry{queue_.top().id, queue_.top().due_ms});
      live_.erase(it);
      queue_.pop();
      ++n;
    }
    return n;
  }

  size_t size() const { return live_.size(); }

  /// How many compactions have run so far.
  size_t compactions() const { return compactions_; }

private:
  using live_map = absl::flat_hash_map<task_id, uint64_t>;

  /// Exposes the container of std::priority_queue for compaction.
  struct queue_type
    : std::priority_queue<seq_item, std::vector<seq_item>, comes_after> {
    void compact(const live_map& live) {
      std::erase_if(c, [&live](const seq_item& x) {
        auto it = live.find(x.id);
        return it == live.end() || it->second != x.seq;
      });
      std::make_heap(c.begin(), c.end(), comp);
    }
  };

  /// Pops stale items off the top; returns the map entry of the live top
  /// item, or end() when the queue holds no live item.
  live_map::iterator drop_stale_top() {
    while (!queue_.empty()) {
      const auto& top = queue_.top();
      auto it = live_.find(top.id);
      if (it != live_.end() && it->second == top.seq)
        return it;
      queue_.pop();
    }
    return live_.end();
  }

  void compact_if_stale() {
    if (queue_.size() - live_.size() > live_.size() + min_stale_to_compact) {
      queue_.compact(live_);
      ++compactions_;
    }
  }

  static constexpr size_t min_stale_to_compact = 64;

  queue_type queue_;
  live_map live_;
  uint64_t seq_ = 0;
  size_t compactions_ = 0;
};

/// boost::heap::d_ary_heap, arity 4, mutable, with an id -> handle map for
/// erase and update by id.
class boost_d_ary_adapter {
public:
  static constexpr std::string_view name = "boost_d_ary_heap";
  static constexpr bool compacts_garbage = false;

  explicit boost_d_ary_adapter(int64_t) {}

  bool insert(task_id id, int64_t due_ms) {
    auto [it, fresh] = handles_.try_emplace(id);
    if (!fresh)
      return false;
    it->second = heap_.push(seq_item{due_ms, seq_++, id});
    return true;
  }

  bool erase(task_id id) {
    auto it = handles_.find(id);
    if (it == handles_.end())
      return false;
    heap_.erase(it->second);
    handles_.erase(it);
    return true;
  }

  bool update(task_id id, int64_t due_ms) {
    auto it = handles_.find(id);
    if (it == handles_.end())
      return false;
    heap_.update(it->second, seq_item{due_ms, seq_++, id});
    return true;
  }

  std::optional<int64_t> next_due() const {
    if (heap_.empty())
      return std::nullopt;
    return heap_.top().due_ms;
  }

  size_t pop_due(int64_t now_ms, size_t limit, std::vector<timer_entry>& out) {
    size_t n = 0;
    while (n < limit && !heap_.empty() && heap_.top().due_ms <= now_ms) {
      const auto& top = heap_.top();
      out.push_back(timer_entry{top.id, top.due_ms});
      handles_.erase(top.id);
      heap_.pop();
      ++n;
    }
    return n;
  }

  size_t size() const { return heap_.size(); }

private:
  using heap_type = boost::heap::d_ary_heap<seq_item, boost::heap::arity<4>,
                                            boost::heap::mutable_<true>,
                                            boost::heap::compare<comes_after>>;

  heap_type heap_;
  absl::flat_hash_map<task_id, heap_type::handle_type> handles_;
  uint64_t seq_ = 0;
};

} // namespace dally::bench
