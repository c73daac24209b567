#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <span>
#include <vector>

#include "storage/task_record.hpp"

namespace dally::logic {

/// Pacing of overdue work: a task that was overdue by more than
/// `late_threshold_ms` when the shard started (the backlog of its
/// downtime) fires at most at `rate_per_s`, in due order, through a token
/// bucket; tasks due later fire at once, so new work meets its time while
/// the backlog drains, and a shard that falls behind under load is never
/// held to the paced rate. Backlog entries wait here, up to `max_backlog`.
class overdue_pacer {
public:
  struct options {
    int64_t late_threshold_ms = 1000;
    /// 0: no pacing.
    uint32_t rate_per_s = 0;
    size_t max_backlog = 1;
  };

  explicit overdue_pacer(options opts) : opts_(opts) {}

  bool pacing() const noexcept { return opts_.rate_per_s > 0; }

  /// At the start of a fire pass: earns the tokens since the last one. The
  /// first pass also fixes what counts as the downtime's backlog.
  void start_pass(int64_t now_ms);

  /// The wall clock stepped forward to `now_ms`: what it made overdue by
  /// more than the threshold is backlog, paced like that of a downtime.
  void clock_stepped(int64_t now_ms) noexcept;

  /// Entries indexed before this are late at `now_ms` (and paced).
  int64_t late_before_ms(int64_t now_ms) const noexcept;

  /// Whether the entry `key` is late (see late_before_ms).
  bool late(const storage::due_key& key,
            int64_t late_before_ms) const noexcept {
    return pacing() && key.index_ms < late_before_ms;
  }

  /// Whether a late entry popped from the window must queue: earlier ones
  /// wait, or no token is left.
  bool must_queue() const noexcept { return !backlog_.empty() || !has_token(); }

  /// Queues a late entry; false when the backlog is full (the caller keeps
  /// the entry in the window).
  bool enqueue(const storage::due_key& key);

  /// A late entry fires: it spends a token.
  void spend_token() noexcept { tokens_milli_ -= 1000; }

  /// Whether queued entries may fire now.
  bool turn_waiting() const noexcept {
    return !backlog_.empty() && has_token();
  }

  /// Moves the next queued entries into `out` (replacing its contents): up
  /// to `limit`, and no more than the tokens allow.
  size_t take_turns(size_t limit, std::vector<storage::due_key>& out);

  /// Puts entries taken from the front back (nothing acted upon them).
  void put_back(std::span<const storage::due_key> keys) {
    backlog_.insert(backlog_.begin(), keys.begin(), keys.end());
  }

  /// Whether popping from the window must pause until the backlog drains.
  bool full() const noexcept { return backlog_.size() >= opts_.max_backlog; }

  bool empty() const noexcept { return backlog_.empty(); }
  size_t size() const noexcept { return backlog_.size(); }

  /// When the next token comes (now if one is left).
  int64_t next_token_ms() const noexcept;

  /// Forgets the queued entries (the window is reloaded from the store).
  void clear();

private:
  bool has_token() const noexcept { return tokens_milli_ >= 1000; }
  int64_t capacity_milli() const noexcept;

  options opts_;
  /// Overdue entries waiting for a token, in due order.
  std::deque<storage::due_key> backlog_;
  bool bucket_started_ = false;
  /// Entries due before this (set by the first pass) are the backlog of
  /// the downtime before the shard started.
  bool backlog_started_ = false;
  int64_t backlog_before_ms_ = std::numeric_limits<int64_t>::max();
  int64_t tokens_milli_ = 0;
  int64_t tokens_at_ms_ = 0;
};

} // namespace dally::logic
