#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "sim/reference.hpp"

namespace dally::sim {

/// A broken invariant: which one, and what showed it.
struct violation {
  std::string invariant;
  std::string detail;
};

/// A schedule request as the client sent it: all the oracle knows of a
/// task's intended life comes from here.
struct task_request {
  /// The idempotency key (unique per request in the simulator; its retries
  /// carry it too).
  std::string key;
  std::string topic;
  std::string payload;
  when_asked when;
  /// The delivery policy asked for.
  int64_t lease_ms = 30'000;
  uint32_t max_attempts = 1;
  int64_t backoff_initial_ms = 0;
  uint32_t backoff_multiplier_permille = 1'000;
  int64_t backoff_max_ms = 0;
};

/// A delivery's id, as the engine numbers it.
struct delivery_ref {
  uint64_t id = 0;
  uint64_t occurrence = 0;
  uint32_t attempt = 0;
};

/// One delivery as it left the engine for a consumer: put in the
/// consumer's mailbox, which may read it much later.
struct delivery_sent {
  delivery_ref ref;
  /// The due time the delivery carries (the engine's claim, checked).
  int64_t due_ms = 0;
  std::string topic;
  std::string payload;
  /// True time as it left.
  int64_t true_ms = 0;
  /// The consumer (one number per consumer actor, never reused), and
  /// whether it was still alive (else the delivery fails at once).
  uint64_t consumer = 0;
  bool consumer_alive = true;
};

/// What a consumer answered to a delivery: `later` leaves it to the lease
/// (or to an ack, nack or touch through the engine).
enum class consumer_verdict : uint8_t { ack, nack, later };

/// How the engine answered a revoke, as the answer left it; `failed` for
/// an error (the change is then in doubt).
enum class change_answer : uint8_t {
  done,
  in_flight,
  completed,
  not_found,
  failed
};

/// The engine's view of a task at the end of a run: live, gone (not found),
/// a dead letter, or quarantined (its get failed with corrupt_record).
enum class final_state : uint8_t { live, gone, dead, quarantined };

/// The invariant checker, free of CAF. It keeps its own model of every
/// task, fed only by what is true outside the engine: each request a client
/// sent (and when it reached the engine), each answer the engine gave (as
/// it left the engine, before any network could drop it), each delivery
/// as it left the engine and what its consumer answered, true time, and
/// every reading of the wall clock the engine itself made. What the engine
/// reports (a due time, a lease deadline, an attempt) is a claim it checks,
/// never a basis for a check.
///
/// Invariants (docs/simulation.md has the table):
/// - `unique_id`: a key's schedules get one id, and no two keys share one.
/// - `payload`: a delivery carries the topic and payload asked for.
/// - `due_time`: a one-shot delivery's due time is the requested one (at,
///   or within the engine's readings while it took the request plus the
///   delay), or one a reschedule asked for.
/// - `recurrence_due`: an occurrence's due time is a point of the
///   reference schedule, and comes only after a consumer acked the
///   previous occurrence, no earlier than the first point after both the
///   previous due time and that ack.
/// - `never_early`: no delivery leaves before the engine's wall clock
///   read its due time (exactly, against the readings it made), nor while
///   true time is more than the clock's skew bound before it.
/// - `attempts`: each delivery of an occurrence has a higher attempt than
///   the one before, one higher unless something may have lost one unseen.
/// - `lease`: a redelivery leaves no earlier than the lease (from the due
///   time, or from an accepted touch) plus the backoff, or than a nack's
///   retry delay; the engine refuses an ack or touch of the attempt it
///   last sent only once its clock read the end of that lease.
/// - `revoke`: nothing leaves after a revoke's `done` left the engine; at
///   most the running delivery after `in_flight`; such a task ends gone.
/// - `recurrence_count`: no more occurrences than the count, and a bounded
///   recurrence that ends has had every occurrence acked.
/// - `retry`: a nacked or expired delivery comes back with the next
///   attempt, or after the last attempt the task is a dead letter: it does
///   not end gone after a failed delivery.
/// - `lost`, `liveness`, `dead_letter`, `corrupt_record`: the end states.
class oracle {
public:
  explicit oracle(int64_t max_skew_ms) : max_skew_ms_(max_skew_ms) {
    // nop
  }

  // -- the engine's wall clock ------------------------------------------------

  /// The engine read its wall clock and got `wall_ms`.
  void clock_read(int64_t wall_ms);

  /// The highest reading the engine made so far.
  int64_t high_water_ms() const noexcept { return high_water_ms_; }

  /// A position in the stream of readings, for `touch_answered`.
  size_t reading_mark() const noexcept { return readings_.size(); }

  // -- clients ----------------------------------------------------------------

  /// A schedule request reached the engine (kept once per key: the first
  /// copy of its first try counts).
  void schedule_arrived(const task_request& req, int64_t true_ms);

  /// The engine answered the schedule of `key` with task `id`.
  std::optional<violation> schedule_answered(const std::string& key,
                                             uint64_t id, int64_t true_ms);

  /// A reschedule of `id` to `due_ms` reached the engine (whatever it
  /// answers, it may have taken effect).
  void reschedule_arrived(uint64_t id, int64_t due_ms);

  void revoke_arrived(uint64_t id);
  void revoke_answered(uint64_t id, change_answer answer);

  // -- consumers --------------------------------------------------------------

  /// A delivery left the engine; checked at once.
  std::optional<violation> sent(const delivery_sent& d);

  /// A consumer answered delivery `d` (for nack, `retry_in_ms` as given).
  void answered(const delivery_ref& d, consumer_verdict v,
                std::optional<int64_t> retry_in_ms = std::nullopt);

  /// The engine answered a touch of `d` extending it by `extend_ms` (0: the
  /// task's lease) that reached it at reading mark `arrived_mark`; a
  /// refusal is checked as `ack_answered`'s.
  std::optional<violation> touch_answered(const delivery_ref& d,
                                          int64_t extend_ms, bool accepted,
                                          size_t arrived_mark);

  /// A touch of `d` by `extend_ms` left at reading mark `sent_mark` on a
  /// way where its answer may come late or never (in a cluster, forwarded
  /// to the owner): from now the lease may end as early as that touch would
  /// set it, and `touch_answered` makes it exact if the answer comes.
  void touch_may_apply(const delivery_ref& d, int64_t extend_ms,
                       size_t sent_mark);

  /// The engine answered an ack of `d` that a consumer sent through it. A
  /// refusal of the attempt the engine last sent means its lease ran out:
  /// the ack does not count, and unless something may have moved the task
  /// unseen (a restart, a reschedule, a revoke, the holder's death), the
  /// engine's clock must have read the end of the lease.
  std::optional<violation> ack_answered(const delivery_ref& d, bool accepted);

  /// The consumer died: what it held is requeued at once.
  void consumer_died(uint64_t consumer) { ++deaths_[consumer]; }

  // -- faults -----------------------------------------------------------------

  /// Deliveries may have been lost unseen (a crash, a disk failure, a
  /// consumer's death, a step that let time pass): attempts may skip.
  void disturbance() { ++disturbances_; }

  /// The engine (or a shard) restarted from its store: what was in flight
  /// without a write comes back at once, before its lease.
  void restart() {
    ++restarts_;
    ++disturbances_;
  }

  /// The wall clock stepped back. A running lease keeps its length across
  /// the step, so it may end before the clock reads its old end again:
  /// lease ends are not judged across it.
  void clock_stepped_back() { ++backsteps_; }

  /// The stored record of `id` was damaged while the engine was down.
  void damaged(uint64_t id) { tasks_[id].damaged = true; }

  // -- the end ----------------------------------------------------------------

  /// Tasks whose schedule the engine answered, for the end-of-run check.
  std::vector<uint64_t> known_ids() const;

  /// A task whose first occurrence has not left yet, and the latest due
  /// time its request allows (engine wall clock), for the liveness bound
  /// after the heal.
  struct awaited {
    uint64_t id = 0;
    int64_t due_ms = 0;
  };

  /// Every task the engine took whose first occurrence has not left yet,
  /// except those a reschedule, a revoke or damage may have moved.
  std::vector<awaited> awaited_first() const;

  /// Checks task `id` after the liveness phase, given the engine's view of
  /// it and, for a dead letter, its attempt count.
  std::optional<violation> check_final(uint64_t id, final_state state,
                                       uint32_t dead_attempt) const;

  uint64_t deliveries() const noexcept { return deliveries_; }

private:
  struct key_state {
    task_request req;
    std::optional<reference_schedule> ref;
    size_t arrived_mark = 0;
    int64_t arrived_true_ms = 0;
    std::optional<uint64_t> id;
  };

  /// One occurrence's deliveries as the oracle saw them.
  struct occurrence_state {
    int64_t due_ms = 0;
    uint32_t last_attempt = 0;
    /// Counters when the last attempt left.
    uint64_t disturbances_at_last = 0;
    uint64_t restarts_at_last = 0;
    uint64_t backsteps_at_last = 0;
    uint64_t reschedules_at_last = 0;
    uint64_t consumer = 0;
    uint64_t consumer_deaths_at_last = 0;
    bool consumer_alive = true;
    /// Lower bounds of the last attempt's release time and lease deadline
    /// (engine wall clock), from the request, nacks and touches.
    int64_t index_lo_ms = 0;
    int64_t lease_lo_ms = 0;
    /// The consumer nacked the last attempt: when (reading mark) and the
    /// retry delay.
    std::optional<size_t> nack_mark;
    int64_t nack_retry_ms = 0;
    /// A consumer acked this occurrence (its current attempt), first at
    /// this reading mark.
    bool acked = false;
    size_t ack_mark = 0;
  };

  struct task_state {
    /// The engine answered a schedule with this id (else the oracle knows
    /// the task only from a delivery).
    bool answered = false;
    std::optional<std::string> key;
    /// Bounds of the engine's reading when it took the request.
    int64_t now_lo_ms = 0;
    int64_t now_hi_ms = 0;
    /// The reading itself, once a due time pinned it.
    std::optional<int64_t> now_ms;
    /// Due times reschedules asked for, and how many reached the engine.
    std::set<int64_t> reschedules;
    uint64_t reschedules_arrived = 0;
    uint32_t revokes_arrived = 0;
    uint32_t revokes_definite = 0;
    bool revoke_failed = false;
    std::optional<change_answer> revoked;
    uint32_t sent_after_in_flight = 0;
    bool damaged = false;
    std::map<uint64_t, occurrence_state> occurrences;
  };

  std::optional<int64_t> min_since(size_t mark) const;
  std::optional<int64_t> max_since(size_t mark) const;
  void bound_now(task_state& t, const key_state& k) const;
  /// The task a delivery belongs to; a violation if it carries what no
  /// client asked for, or what another task's client asked for.
  std::optional<violation> match(const delivery_sent& d, task_state*& out,
                                 const key_state*& key);
  std::optional<violation> check_due(const delivery_sent& d, task_state& t,
                                     const key_state& k);
  bool first_due_fits(task_state& t, const key_state& k, int64_t due_ms) const;
  bool next_due_fits(task_state& t, const key_state& k, int64_t due_ms,
                     const occurrence_state& prev) const;
  /// Attempt order and, for the next attempt, the earliest it may leave
  /// (`earliest`, when the oracle can tell).
  std::optional<violation> check_attempt(const delivery_sent& d,
                                         const task_state& t,
                                         const key_state& k,
                                         std::optional<int64_t>& earliest);
  std::optional<int64_t> earliest_retry_ms(const occurrence_state& occ,
                                           const key_state& k,
                                           uint64_t reschedules) const;
  void record(const delivery_sent& d, task_state& t, const key_state& k,
              std::optional<int64_t> earliest);
  occurrence_state* current(const delivery_ref& d);
  std::optional<violation> check_gone(uint64_t id, const task_state& t,
                                      const key_state& k) const;
  /// Whether something since the last attempt of `occ` left may have
  /// ended or moved it unseen: a restart, a reschedule, a revoke, damage,
  /// or its consumer's death.
  bool moved_unseen(const task_state& t, const occurrence_state& occ) const;
  std::optional<violation> refused(const delivery_ref& d, const char* what);

  int64_t max_skew_ms_;
  std::vector<int64_t> readings_;
  int64_t high_water_ms_ = INT64_MIN;
  uint64_t disturbances_ = 0;
  uint64_t restarts_ = 0;
  uint64_t backsteps_ = 0;
  uint64_t deliveries_ = 0;
  std::map<uint64_t, uint64_t> deaths_;
  std::map<std::string, key_state> keys_;
  std::map<std::string, std::string> key_of_payload_;
  std::map<uint64_t, task_state> tasks_;
};

} // namespace dally::sim
