#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <utility>
#include <vector>

namespace dally::logic {

/// The deadlines of a notifier's requests that await an answer, so that
/// one timer of its own times them out. CAF 0.17 keeps a request's
/// timeout in its clock until the deadline even when the answer came long
/// before (it never cancels one): with a lease of an hour, every delivery
/// batch of the hour would stay there. Here an answer drops its entry, so
/// what is kept is bounded by the deliveries in flight. Free of CAF:
/// requests are named by an opaque 64-bit id.
class answer_deadlines {
public:
  static constexpr int64_t never_ms = std::numeric_limits<int64_t>::max();

  /// Starts waiting for request `id` until `deadline_ms`.
  void track(int64_t deadline_ms, uint64_t id);

  /// The answer to `id` (tracked with `deadline_ms`) came, or it timed
  /// out: stops waiting. Unknown pairs are ignored.
  void untrack(int64_t deadline_ms, uint64_t id);

  /// Removes and returns the requests whose deadline is at or before
  /// `now_ms`, earliest first.
  std::vector<uint64_t> pop_due(int64_t now_ms);

  /// The earliest deadline; never_ms when nothing is tracked.
  int64_t next_ms() const noexcept;

  size_t size() const noexcept { return entries_.size(); }

  bool empty() const noexcept { return entries_.empty(); }

private:
  /// (deadline_ms, id): ordered by deadline, and each entry found again
  /// by the pair its answer handler kept.
  std::set<std::pair<int64_t, uint64_t>> entries_;
};

} // namespace dally::logic
