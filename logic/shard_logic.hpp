#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/error.hpp"
#include "core/result.hpp"
#include "core/task.hpp"
#include "logic/engine_config.hpp"
#include "logic/release_queue.hpp"
#include "logic/task_request.hpp"
#include "proto/dally_api.pb.h"
#include "storage/due_window.hpp"
#include "storage/task_record.hpp"
#include "storage/task_store.hpp"
#include "storage/write_batch.hpp"

namespace dally::logic {

/// What a revoke, reschedule or kick did (see v1::ChangeOutcome).
enum class change_outcome : uint8_t {
  /// Revoked, moved or kicked.
  done,
  /// A delivery is under way. A revoke still removes the task (the running
  /// delivery is its last); a reschedule changes nothing.
  in_flight,
  /// Issued by this shard, no longer live (completed, revoked, dead).
  completed,
  /// Never issued by this shard.
  not_found,
};

/// Names one delivery: task, occurrence (the record's fired_count when it
/// was delivered) and attempt.
struct delivery_ref {
  core::task_id id = 0;
  uint64_t occurrence = 0;
  uint32_t attempt = 0;

  friend bool operator==(const delivery_ref&, const delivery_ref&) = default;
};

/// A schedule's answer.
struct scheduled_task {
  core::task_id id = 0;
  int64_t due_ms = 0;
  /// False when an earlier schedule with the same idempotency key made it.
  bool created = true;
};

/// A get's answer: a live task or a dead letter.
struct task_info {
  core::task_record record;
  bool dead = false;
  std::string dead_reason;
};

/// One page of dead letters.
struct dead_page {
  std::vector<storage::dead_letter> dead;
  /// Non-zero when more follow: the id to continue after.
  core::task_id next_after = 0;
};

/// Event counts since the shard started.
struct shard_counters {
  uint64_t scheduled = 0;
  uint64_t fired = 0;
  uint64_t acked = 0;
  uint64_t nacked = 0;
  uint64_t redelivered = 0;
  uint64_t lease_expired = 0;
  uint64_t dead_lettered = 0;
  uint64_t revoked = 0;
  uint64_t kicked = 0;
  uint64_t commits = 0;
  uint64_t commit_failures = 0;
};

/// The logic of one shard actor, free of CAF: it takes `now` (UTC wall-clock
/// ms) as an argument, reads and writes its task store, keeps the in-memory
/// due window, and returns what the actor must do next. It coordinates: the
/// task's life cycle (core::task_lifecycle, `shard_options::lifecycle`) says
/// what each transition does to a record, and one class per concern keeps
/// the books around it: group commit (staged_batch), leases
/// (lease_tracker), topic parking (topic_parking), the record cache
/// (record_cache), pacing of overdue work (overdue_pacer), idempotency keys
/// (idempotency_keys), fires on their way out (outgoing_fires) and first
/// deliveries without a write (unwritten_fires).
///
/// Group commit: every request that changes tasks stages its writes in one
/// pending batch and returns its answer at once. The answer is valid only
/// once the next `commit` succeeds; the actor holds it (with the response
/// promise) until then and answers with the commit's error otherwise. Reads
/// see staged writes, so the answers of one batch are consistent with one
/// another. Requests that change nothing and find nothing staged may be
/// answered at once (`dirty()` says whether anything is staged).
///
/// Firing: `fire(now)` pops due tasks from the window and stages each as in
/// flight; `commit` then returns them as deliveries, to be handed on only
/// after the commit, so that redeliveries always carry a higher attempt.
/// Tasks due within `fire_lead_ms` fire ahead of time: each delivery
/// carries its release time (the due time) and a `delivery_hold`, and
/// whoever holds it (the notifier) releases it when due, so a delivery
/// never goes out before its due time and releasing it never waits for
/// this shard. Until then a revoke or reschedule cancels the hold and
/// answers done; once the hold is claimed, the delivery is in flight.
///
/// Every popped index entry is checked against the task's current record
/// (staged or stored): entries made stale by a revoke, reschedule or settle
/// are skipped.
class shard_logic {
public:
  /// Uses `store` (owned by the caller, open, this shard's) and starts with
  /// an empty window: the first `fire` loads it, overdue work first, which
  /// is also how a restarted shard recovers.
  shard_logic(storage::task_store& store, shard_options opts);

  shard_logic(const shard_logic&) = delete;
  shard_logic& operator=(const shard_logic&) = delete;

  /// Cancels the holds of first deliveries fired without a write and not
  /// yet released: the shard's successor fires their tasks again at once.
  ~shard_logic();

  // -- requests ---------------------------------------------------------------

  /// Validates `t` (its id and attempt are ignored) against the limits at
  /// `now_ms`, assigns an id of this shard and stages the new task. The
  /// policy is taken as it is (`to_task` fills in the default one). With an
  /// idempotency key already known (staged or stored, unexpired): the same
  /// topic and payload answer the first task's id with created = false (and
  /// its current due time, or 0 once it is no longer live); other content
  /// fails with idempotency_conflict. The key is kept for key_retention_ms.
  core::result<scheduled_task> schedule(int64_t now_ms, core::task t);

  /// Removes a live task. Outcomes: done (pending, or fired and not sent:
  /// in the current batch, or held until its due time; that delivery never
  /// goes out once the revoke is committed), in_flight
  /// (removed, the running delivery is its last: its ack or nack answers
  /// stale_delivery and its lease expiry redelivers nothing), completed
  /// (issued, not live: dead letters included), not_found (never issued).
  core::result<change_outcome> revoke(int64_t now_ms, core::task_id id);

  /// Moves the current occurrence of a pending task to `due_ms` (clearing a
  /// waiting retry). A task fired and not sent (see revoke) counts as
  /// pending: its fire is undone. Outcomes as for revoke; in_flight changes
  /// nothing.
  /// Errors: invalid_time, delay_too_large (as for schedule).
  core::result<change_outcome> reschedule(int64_t now_ms, core::task_id id,
                                          int64_t due_ms);

  /// A live task or a dead letter; not_found if neither.
  core::result<task_info> get(core::task_id id);

  /// Settles a delivery as done: a one-shot task is removed, a periodic one
  /// moves to its next occurrence (computed from the recurrence, in the
  /// same atomic write), or is removed when none is left.
  /// stale_delivery if `d` is not the task's current delivery.
  core::error ack(int64_t now_ms, const delivery_ref& d);

  /// Starts loading the cached records of `ids` into the CPU's caches: a
  /// batch of verdicts about to be settled then waits for its memory side
  /// by side instead of one miss after the other. Changes nothing.
  void prefetch(std::span<const core::task_id> ids) const;

  /// Settles a delivery as failed: retried after `retry_in_ms`, or after
  /// the policy's backoff when unset; dead-lettered if it was the last
  /// attempt. Errors: stale_delivery; invalid_time (negative or beyond the
  /// maximum delay).
  core::error nack(int64_t now_ms, const delivery_ref& d,
                   std::optional<int64_t> retry_in_ms);

  /// Extends a lease to now + `extend_ms` (0: the policy's lease); returns
  /// the new deadline. Errors: stale_delivery, invalid_time.
  core::result<int64_t> touch(int64_t now_ms, const delivery_ref& d,
                              int64_t extend_ms);

  /// The consumer holding `d` died: the task is due again at once (the
  /// attempt counts; dead-lettered if it was the last).
  core::error requeue(int64_t now_ms, const delivery_ref& d);

  /// No consumer took `d` (the topic lost its last consumer, or its
  /// consumers are saturated): the task is pending again with the attempt
  /// not counted, and the topic is marked unavailable until
  /// `set_topic_available` says otherwise.
  core::error undelivered(int64_t now_ms, const delivery_ref& d);

  /// Up to `limit` dead letters with id > `after`.
  core::result<dead_page> dead_letters(core::task_id after, size_t limit);

  /// Moves a dead letter back to pending, due at `due_ms` (default now),
  /// with attempts reset. Outcomes: done; not_found when `id` is no dead
  /// letter (live or unknown).
  core::result<change_outcome> kick(int64_t now_ms, core::task_id id,
                                    std::optional<int64_t> due_ms);

  // -- consumers --------------------------------------------------------------

  /// Whether `topic` has a consumer that can take deliveries. Topics start
  /// unavailable. Making one available brings its parked tasks back.
  void set_topic_available(const std::string& topic, bool available);

  // -- timers -----------------------------------------------------------------

  /// Refills the window as needed, handles expired leases (redelivery with
  /// backoff, or dead letter after the last attempt) and stages at most
  /// `fire_batch` due tasks as in flight. It acts on the index as of the
  /// last commit: a time staged in the current batch (by schedule,
  /// reschedule, nack, touch, ...) counts from the first fire after its
  /// commit. A reload of the window (see above) waits for a clean batch.
  /// On a store error the window stays consistent (nothing popped is lost)
  /// and what was staged before the error stays staged.
  core::error fire(int64_t now_ms);

  /// When `fire` next has work; INT64_MAX if nothing is known. A value at
  /// or before now means at once (more due work, a backlog loading); never
  /// below 0 (min_time_ms), so that `value - now` cannot overflow. While
  /// the backlog is full, only its next token counts.
  int64_t next_wakeup_ms() const;

  /// The wall clock stepped by `step_ms` (forward above 0) to `now_ms`:
  /// running leases keep the time they had left, and after a forward step
  /// what the clock says is overdue fires paced, like the backlog after a
  /// restart.
  void wall_clock_stepped(int64_t now_ms, int64_t step_ms);

  /// Housekeeping, every second or so: forgets expired idempotency keys and
  /// syncs the store when due (periodic durability, or sync with a commit
  /// waiting for its fsync). Writes to the store
  /// directly and may run while writes are staged: it deletes only keys
  /// that have expired, and a key the batch stages again lands after it.
  core::error maintain(int64_t now_ms);

  /// See `storage::task_store::write_failure`.
  core::error write_failure() const;

  // -- group commit -----------------------------------------------------------

  /// Whether writes are staged.
  bool dirty() const noexcept;

  struct commit_result {
    /// On error nothing staged took effect (the outcome of the write is in
    /// doubt, see task_store::commit); the window is as before the batch.
    core::error err;
    /// The batch's fires, now durable as in flight, in due order (empty on
    /// error): each to go out at its release time unless its hold is
    /// cancelled first.
    std::vector<held_delivery> deliveries;
  };

  /// Whether a commit that nobody waited for still waits for its fsync
  /// (durability::sync only): a reply must wait for a commit then, even if
  /// nothing is staged, since what it reports could still be lost.
  bool sync_pending() const noexcept;

  /// Commits everything staged in one atomic write. Counters count only
  /// what a commit made durable; `fired` counts fires committed, held ones
  /// included (a reschedule before their due time undoes them).
  ///
  /// `answers_waiting`: replies wait for this commit. With
  /// durability::sync the store fsyncs the batch before it returns only if
  /// they do or a delivery does (see storage::write_batch::urgent); then it
  /// also fsyncs what earlier commits left waiting, even with nothing
  /// staged. Settlements nobody waits an answer for (a batch consumer's
  /// verdicts, expired leases) wait for the next such commit or for
  /// `maintain`: a power loss may take them, and their tasks are then
  /// delivered again.
  commit_result commit(int64_t now_ms, bool answers_waiting = true);

  // -- state ------------------------------------------------------------------

  const shard_counters& counters() const noexcept;

  /// Index entries in the window's heap.
  size_t window_size() const noexcept;

  /// Parked due tasks per topic without a consumer (or at its cap of
  /// unanswered deliveries), including those dropped from memory (beyond
  /// window.max_in_memory) until the reload. Counted when asked (for
  /// stats), so that parking a task touches no per-topic table.
  std::map<std::string, uint64_t> waiting() const;

  /// Backlog entries waiting for their paced turn.
  size_t backlog_size() const noexcept;

  /// Committed deliveries whose hold is neither released nor cancelled.
  size_t held_size() const noexcept;

  /// Records in the record cache, and the slots of its table: the table
  /// grows with a burst and is rebuilt smaller once the burst is done.
  size_t cached_records() const noexcept;
  size_t record_cache_slots() const noexcept;

  const shard_options& options() const noexcept;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace dally::logic
