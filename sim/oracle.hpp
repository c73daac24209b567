#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace dally::sim {

/// A broken invariant: which one, and what showed it.
struct violation {
  std::string invariant;
  std::string detail;
};

/// What the simulation knows of a task whose schedule was acknowledged.
struct task_expectation {
  /// Occurrences a consumer must see: 1 for a one-shot task, the count of
  /// a bounded recurrence.
  uint64_t occurrences = 1;
  bool recurring = false;
  /// Whether all `occurrences` must fire: true for a count bound (max
  /// count); false for a finite interval list, a fixed timeline whose
  /// points missed while an occurrence was still being delivered are
  /// skipped (catch-up without bursts), so it fires at most its length.
  bool exact_count = true;
  uint32_t max_attempts = 1;
  /// The due time the schedule was acknowledged with (one-shot tasks).
  int64_t due_ms = 0;
};

/// One delivery as a consumer received it.
struct delivery_seen {
  uint64_t id = 0;
  uint64_t occurrence = 0;
  uint32_t attempt = 0;
  int64_t due_ms = 0;
  /// The simulation's true time at receipt.
  int64_t true_ms = 0;
  /// The highest reading of the engine's wall clock up to then.
  int64_t wall_high_water_ms = 0;
  /// The delivery's lease deadline (engine wall clock); 0 if it has none.
  int64_t lease_deadline_ms = 0;

  /// Received only once the engine's clock had read its lease deadline
  /// (see `oracle`).
  bool stale() const {
    return lease_deadline_ms > 0 && wall_high_water_ms >= lease_deadline_ms;
  }
};

/// How the engine answered a revoke.
enum class revoke_answer : uint8_t { done, in_flight, completed, not_found };

/// The engine's view of a task at the end of a run: live, gone (not found),
/// a dead letter, or quarantined (its get failed with corrupt_record).
enum class final_state : uint8_t { live, gone, dead, quarantined };

/// The invariant checker, free of CAF: told every acknowledged request and
/// every delivery in the order they happen, it checks each delivery at
/// once and, after the liveness phase, each task's end state.
///
/// Invariants: never delivered before the due time (by the engine's wall
/// clock high-water mark, exactly, and by true time within the clock's
/// skew); a one-shot delivery carries its acknowledged or a requested
/// due time; each redelivery of an occurrence has a higher attempt, exactly
/// one higher unless the engine crashed, its disk failed or a consumer died
/// in between; nothing delivered after a revoke answered done, at most the
/// running delivery after in_flight; a bounded recurrence fires at most
/// its count of occurrences, and exactly its count (max_count) once all
/// are due; every
/// acknowledged, unrevoked task is delivered until acked (or is a dead
/// letter); dead letters only after max attempts; a task whose stored
/// record was damaged is never delivered again, and ends quarantined or
/// gone (and nothing else does).
///
/// A delivery that reaches its consumer only once the engine's wall clock
/// has read its lease deadline is stale: its lease ran out while it waited
/// in the consumer's mailbox, so a later attempt (or, after a revoke, none)
/// may already have been delivered. Stale deliveries are exempt from the
/// attempt order and revoke checks, but count as deliveries of their
/// occurrence: the ack may still win if the shard has not yet expired the
/// lease.
class oracle {
public:
  explicit oracle(int64_t max_skew_ms) : max_skew_ms_(max_skew_ms) {
    // nop
  }

  /// A schedule acknowledged task `id` (again, for a retried key).
  void acknowledged(uint64_t id, const task_expectation& what);

  /// A reschedule of `id` to `due_ms` was sent (it may take effect even if
  /// no answer comes back).
  void reschedule_sent(uint64_t id, int64_t due_ms);

  /// A revoke of `id` was sent; its answer may never arrive.
  void revoke_sent(uint64_t id);

  void revoke_answered(uint64_t id, revoke_answer answer);

  /// The engine crashed, its disk failed, or a consumer died: deliveries
  /// may have been lost unseen, so attempts may skip.
  void disturbance() { ++disturbances_; }

  /// The stored record of `id` was damaged while the engine was down.
  void damaged(uint64_t id) { tasks_[id].damaged = true; }

  /// Acknowledged tasks whose record has not been damaged.
  std::vector<uint64_t> intact_ids() const;

  std::optional<violation> delivered(const delivery_seen& d);

  /// Acknowledged tasks, for the end-of-run check.
  std::vector<uint64_t> known_ids() const;

  /// Checks task `id` after the liveness phase, given the engine's view of
  /// it and, for a dead letter, its attempt count.
  std::optional<violation> check_final(uint64_t id, final_state state,
                                       uint32_t dead_attempt) const;

  uint64_t deliveries() const noexcept { return deliveries_; }

private:
  struct occurrence_state {
    uint32_t max_attempt = 0;
    uint64_t disturbances_at_last = 0;
  };

  struct task_state {
    /// A schedule of it was acknowledged (else only deliveries were seen).
    bool acked = false;
    task_expectation what;
    std::set<int64_t> dues;
    std::map<uint64_t, occurrence_state> seen;
    bool revoke_sent = false;
    std::optional<revoke_answer> revoke;
    uint64_t after_revoke = 0;
    bool damaged = false;
  };

  int64_t max_skew_ms_;
  uint64_t disturbances_ = 0;
  uint64_t deliveries_ = 0;
  std::map<uint64_t, task_state> tasks_;
};

} // namespace dally::sim
