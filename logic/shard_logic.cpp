#include "logic/shard_logic.hpp"

#include <algorithm>
#include <cassert>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include <absl/container/flat_hash_map.h>

#include "core/placement.hpp"
#include "core/task_lifecycle.hpp"
#include "core/time_range.hpp"
#include "logic/idempotency_keys.hpp"
#include "logic/lease_tracker.hpp"
#include "logic/outgoing_fires.hpp"
#include "logic/overdue_pacer.hpp"
#include "logic/record_cache.hpp"
#include "logic/reuse.hpp"
#include "logic/staged_batch.hpp"
#include "logic/topic_parking.hpp"
#include "logic/unwritten_fires.hpp"

namespace dally::logic {

namespace {

using core::errc;
using core::saturating_add;
using core::task_record;
using core::task_state;
using storage::due_key;

constexpr int64_t never_ms = std::numeric_limits<int64_t>::max();

/// Index slices a single `fire` may read, so that a long (re)load of the
/// window interleaves with requests.
constexpr size_t refill_slices_per_fire = 16;

/// Index entries handled per store read while firing.
constexpr size_t fire_chunk = 512;

/// Idempotency keys deleted per `maintain`.
constexpr size_t expire_keys_per_maintain = 4096;

std::string describe(const delivery_ref& d) {
  return "delivery (task " + std::to_string(d.id) + ", occurrence " +
         std::to_string(d.occurrence) + ", attempt " +
         std::to_string(d.attempt) + ")";
}

core::error stale(const delivery_ref& d, const std::string& why) {
  return core::error{errc::stale_delivery,
                     describe(d) + " is not current: " + why};
}

/// Checks a requested due time as task::validate checks a task's.
core::error check_due(int64_t now_ms, int64_t due_ms,
                      const core::task_limits& limits) {
  auto range = " is outside the supported range " +
               core::format_time(core::min_time_ms) + " to " +
               core::format_time(core::max_time_ms);
  if (!core::is_valid_time(now_ms))
    return core::error{errc::invalid_time,
                       "now " + core::format_time(now_ms) + range};
  if (!core::is_valid_time(due_ms))
    return core::error{errc::invalid_time,
                       "due time " + core::format_time(due_ms) + range};
  if (due_ms > now_ms && due_ms - now_ms > limits.max_delay_ms)
    return core::error{errc::delay_too_large,
                       "due time " + core::format_time(due_ms) + " lies " +
                         core::format_duration(due_ms - now_ms) +
                         " after now; the maximum delay is " +
                         core::format_duration(limits.max_delay_ms)};
  return {};
}

/// Checks a delay a consumer asks for (nack's retry, touch's extension).
core::error check_delay(std::string_view what, int64_t delay_ms,
                        const core::task_limits& limits) {
  if (delay_ms < 0 || delay_ms > limits.max_delay_ms)
    return core::error{errc::invalid_time,
                       std::string{what} + " " +
                         core::format_duration(delay_ms) +
                         " is negative or exceeds the maximum delay " +
                         core::format_duration(limits.max_delay_ms)};
  return {};
}

core::task_id id_of(const storage::write_batch::op& op) {
  return std::visit(
    [](const auto& x) -> core::task_id {
      using op_type = std::decay_t<decltype(x)>;
      using wb = storage::write_batch;
      if constexpr (std::is_same_v<op_type, wb::put_op>)
        return x.rec.task.id;
      else if constexpr (std::is_same_v<op_type, wb::replace_op>)
        return x.after.task.id;
      else if constexpr (std::is_same_v<op_type, wb::erase_op> ||
                         std::is_same_v<op_type, wb::bury_op>)
        return x.key.id;
      else if constexpr (std::is_same_v<op_type, wb::revive_op>)
        return x.dead_id;
      else
        return 0;
    },
    op);
}

shard_options normalized(shard_options opts) {
  opts.fire_batch = std::max<size_t>(opts.fire_batch, 1);
  opts.max_backlog = std::max<size_t>(opts.max_backlog, 1);
  opts.window.max_in_memory = std::max<size_t>(opts.window.max_in_memory, 1);
  return opts;
}

} // namespace

// -- state --------------------------------------------------------------------

/// The coordinator: each request, fire and commit asks the task life cycle
/// what a transition does and keeps the books of the classes below in
/// step with it.
struct shard_logic::impl {
  impl(storage::task_store& store, shard_options opts)
    : store_(store), opts_(normalized(std::move(opts))),
      life_(lifecycle_of(opts_)),
      window_(std::make_unique<storage::due_window>(store_, opts_.window)),
      keys_(store_, opts_.key_retention_ms), unwritten_(store_.meta()),
      cache_(opts_.record_cache_bytes),
      parking_({opts_.max_unanswered_per_topic, opts_.fire_batch,
                opts_.window.max_in_memory}),
      pacer_({opts_.late_threshold_ms, opts_.overdue_rate_per_s,
              opts_.max_backlog}) {
    // nop
  }

  // -- lookups ----------------------------------------------------------------

  const core::task_limits& limits() const noexcept { return opts_.limits; }

  /// The current record of `id`: staged, else copied from the record
  /// cache or read into `scratch`. Given `taken`, a cached record is moved
  /// out of the cache instead of copied, for a caller about to stage a
  /// change of it (its commit caches the result), and `*taken` tells.
  core::error find(core::task_id id, std::optional<task_record>& scratch,
                   record_slot& out, bool* taken = nullptr) {
    if (batch_.find(id, out))
      return {};
    bool cached = false;
    if (taken != nullptr) {
      cached = *taken =
        cache_.take(id, [&](task_record&& rec) { scratch = std::move(rec); });
    } else if (const auto* rec = cache_.find(id)) {
      scratch = *rec;
      cached = true;
    }
    if (!cached) {
      auto got = store_.get(id);
      if (!got)
        return got.err();
      if (!*got)
        return {};
      scratch = std::move(**got);
      unwritten_.complete_stored(*scratch);
    }
    out.rec = &*scratch;
    out.base = storage::write_batch::key_of(*scratch);
    return {};
  }

  /// The in-flight record that `d` names, else stale_delivery. Every
  /// caller stages a change of the record it finds, so a cached one is
  /// taken out of the cache rather than copied; a stale one goes back.
  core::error find_current(const delivery_ref& d,
                           std::optional<task_record>& scratch,
                           record_slot& out) {
    bool taken = false;
    if (auto err = find(d.id, scratch, out, &taken))
      return err;
    auto put_back = [&](core::error err) {
      if (taken)
        cache_.remember(std::move(*scratch));
      return err;
    };
    if (!out.rec)
      return stale(d, "the task is not live");
    const auto& rec = *out.rec;
    if (rec.state != task_state::in_flight)
      return put_back(stale(d, "the task is not in flight"));
    if (rec.fired_count != d.occurrence || rec.task.attempt != d.attempt)
      return put_back(stale(d, "the current delivery is occurrence " +
                                 std::to_string(rec.fired_count) +
                                 ", attempt " +
                                 std::to_string(rec.task.attempt)));
    return {};
  }

  /// Whether this shard handed out `id` (committed or staged).
  bool issued(core::task_id id) const {
    const auto& meta = store_.meta();
    if (meta.shard_count == 0 ||
        core::shard_of(id, meta.shard_count) != meta.shard)
      return false;
    auto local = core::local_id_of(id, meta.shard_count);
    // Local id 0 is never handed out (see rocks_task_store::allocate_id).
    return local >= 1 && local < std::max(meta.next_local_id, issued_below_);
  }

  /// The outcome of a revoke or reschedule of a task that is not live.
  core::result<change_outcome> absent_outcome(core::task_id id,
                                              const record_slot& s) {
    if (s.entry != nullptr || issued(id))
      return change_outcome::completed;
    auto dead = store_.get_dead(id);
    if (!dead)
      return dead.err();
    return *dead ? change_outcome::completed : change_outcome::not_found;
  }

  /// The due time of the live task `id`, or 0 when it is no longer live
  /// (a schedule's answer for a known idempotency key).
  core::result<scheduled_task> known_task(core::task_id id) {
    scheduled_task out{id, 0, false};
    std::optional<task_record> scratch;
    record_slot found;
    if (auto err = find(id, scratch, found))
      return err;
    if (found.rec != nullptr)
      out.due_ms = found.rec->task.due_ms;
    return out;
  }

  // -- transitions ------------------------------------------------------------

  /// Stages what a transition of the life cycle did to the slot's record,
  /// which was at `before`.
  void stage(record_slot& s, const due_key& before, core::transition step,
             int64_t now_ms) {
    switch (step.what) {
      case core::transition::kind::keep:
        batch_.replace(s, before);
        return;
      case core::transition::kind::remove:
        // A transition that ends the task leaves its record as it was.
        assert(storage::write_batch::key_of(*s.rec) == before);
        batch_.erase(s);
        return;
      case core::transition::kind::bury:
        assert(storage::write_batch::key_of(*s.rec) == before);
        ++pending_.dead_lettered;
        batch_.bury(s, now_ms, std::move(step.reason));
        return;
    }
  }

  /// Tracks the lease of a committed in-flight record.
  void track_lease(const task_record& rec) {
    leases_.track(rec.task.id, rec.lease_deadline_ms);
    parking_.count_in_flight(rec.task.id, rec.task.topic);
  }

  /// Tracks the lease of an in-flight record met again (after a restart
  /// or a reload): it runs out within its length of `now_ms` (or of the
  /// due time it started at), also when it was granted under a wall clock
  /// that has stepped back since.
  void track_met_lease(int64_t now_ms, const task_record& rec) {
    if (rec.lease_ms == 0) {
      track_lease(rec);
      return;
    }
    auto latest_ms =
      core::saturating_add(std::max(now_ms, rec.index_ms()), rec.lease_ms);
    leases_.track_at_most(rec.task.id, rec.lease_deadline_ms, latest_ms);
    parking_.count_in_flight(rec.task.id, rec.task.topic);
  }

  /// A committed record read for an entry and not acted upon goes back to
  /// the cache: a parked or paced task comes back soon, and reading it
  /// again is what made an overloaded shard slower still.
  void keep_record(record_slot& s) {
    if (s.entry == nullptr && s.rec != nullptr)
      cache_.remember(std::move(*s.rec));
  }

  void clear_staging() {
    batch_.clear();
    keys_.clear();
    fires_.clear_staged();
    leases_.forget_consumed();
    pending_ = shard_counters{};
  }

  /// A fresh window over the store: brings back every entry, those dropped
  /// from memory included, so parked and backlog state starts over.
  void reload() {
    window_ = std::make_unique<storage::due_window>(store_, opts_.window);
    parking_.reset();
    pacer_.clear();
  }

  // -- firing -----------------------------------------------------------------

  core::error fire(int64_t now_ms);
  int64_t fire_horizon(int64_t now_ms);
  core::error fire_backlog(int64_t now_ms, size_t& budget);
  core::error fire_window(int64_t now_ms, int64_t horizon_ms, size_t& budget);
  core::error fire_leases(int64_t now_ms, size_t& budget);
  core::error expire_leases(int64_t now_ms,
                            const std::vector<core::timer_entry>& leases);
  void expire_lease(int64_t now_ms, record_slot& s);
  core::error process(int64_t now_ms, const std::vector<due_key>& keys,
                      bool from_backlog);
  core::error fetch_records(const std::vector<due_key>& keys,
                            bool from_backlog);
  void act_on(int64_t now_ms, const due_key& key, bool from_backlog,
              int64_t late_before_ms);
  bool moved_to_index_time(int64_t now_ms, const due_key& key, record_slot& s);
  void stage_fire(int64_t now_ms, const due_key& key, record_slot& s);
  int64_t look_ahead_at(int64_t next_ms) const noexcept;
  int64_t next_wakeup_ms() const;

  // -- commit -----------------------------------------------------------------

  commit_result commit(int64_t now_ms, bool answers_waiting);
  core::error sync_for_answers(bool answers_waiting);
  void defer_new_index_entries();
  core::error write(bool urgent, int64_t horizon_ms);
  void roll_back();
  void apply_commit(int64_t now_ms, std::vector<held_delivery>& deliveries);
  void update_leases(int64_t now_ms);
  void settle_committed(storage::write_batch::op& op, int64_t hot_before_ms);
  void track_unwritten_fires();
  void build_deliveries(std::vector<held_delivery>& out);
  void add_pending_counters();

  // -- members ----------------------------------------------------------------

  storage::task_store& store_;
  shard_options opts_;
  const core::task_lifecycle& life_;
  std::unique_ptr<storage::due_window> window_;
  staged_batch batch_;
  idempotency_keys keys_;
  outgoing_fires fires_;
  unwritten_fires unwritten_;
  lease_tracker leases_;
  record_cache cache_;
  topic_parking parking_;
  overdue_pacer pacer_;
  /// When `fire` last looked ahead.
  int64_t looked_ahead_ms_ = core::min_time_ms;
  /// Counter increments that the next commit makes real.
  shard_counters pending_;
  shard_counters counters_;
  /// Local ids below this were handed out by this instance.
  uint64_t issued_below_ = 0;

  /// Scratch space of `fire`, kept to save allocations.
  std::vector<due_key> keys_scratch_;
  std::vector<core::timer_entry> leases_scratch_;
  std::vector<core::task_id> read_ids_;
  std::vector<task_record> fetched_;
  absl::flat_hash_map<core::task_id, size_t> fetched_at_;
};

// -- firing -------------------------------------------------------------------

core::error shard_logic::impl::fire(int64_t now_ms) {
  parking_.begin_pass();
  if (parking_.reload_pending() && batch_.empty()) {
    // The fresh window reads every entry back from the index, those
    // whose writing commits deferred included.
    if (auto err = store_.index_deferred())
      return err;
    reload();
  }
  if (auto err = window_->refill(now_ms, refill_slices_per_fire))
    return err;
  pacer_.start_pass(now_ms);
  auto horizon_ms = fire_horizon(now_ms);
  auto budget = opts_.fire_batch;
  // The paced backlog first: it holds the oldest due work.
  if (auto err = fire_backlog(now_ms, budget))
    return err;
  if (auto err = fire_window(now_ms, horizon_ms, budget))
    return err;
  if (auto err = fire_leases(now_ms, budget))
    return err;
  // Nothing staged: nothing to roll back either. (Fires without a write
  // stage no op but still need the commit.)
  if (batch_.empty() && !fires_.any_staged()) {
    batch_.forget_consumed();
    leases_.forget_consumed();
  }
  // After this pass's pops, so that what it fired counts against the
  // room; the next pass pops what these put back.
  parking_.release_deferred(*window_);
  return {};
}

/// Tasks due within the lead fire now and are held until due; tasks
/// already due always fire.
int64_t shard_logic::impl::fire_horizon(int64_t now_ms) {
  if (opts_.fire_lead_ms > 0 &&
      now_ms >= look_ahead_at(window_->next_wakeup_ms())) {
    looked_ahead_ms_ = now_ms;
    return saturating_add(now_ms, opts_.fire_lead_ms);
  }
  return now_ms;
}

core::error shard_logic::impl::fire_backlog(int64_t now_ms, size_t& budget) {
  while (budget > 0 && pacer_.turn_waiting()) {
    auto n = pacer_.take_turns(std::min(budget, fire_chunk), keys_scratch_);
    budget -= n;
    if (auto err = process(now_ms, keys_scratch_, true))
      return err;
  }
  return {};
}

/// Pops due entries while they can fire: not while the backlog is full,
/// nor while every topic is closed waiting for answers (what it popped
/// then would only be read and parked; it stays in the window until a
/// topic opens).
core::error shard_logic::impl::fire_window(int64_t now_ms, int64_t horizon_ms,
                                           size_t& budget) {
  while (budget > 0 && !pacer_.full() && !parking_.only_parks()) {
    keys_scratch_.clear();
    auto n =
      window_->pop_due(horizon_ms, std::min(budget, fire_chunk), keys_scratch_);
    if (n == 0)
      break;
    budget -= n;
    if (auto err = process(now_ms, keys_scratch_, false))
      return err;
  }
  return {};
}

core::error shard_logic::impl::fire_leases(int64_t now_ms, size_t& budget) {
  while (budget > 0) {
    leases_scratch_.clear();
    auto n =
      leases_.pop_due(now_ms, std::min(budget, fire_chunk), leases_scratch_);
    if (n == 0)
      break;
    budget -= n;
    if (auto err = expire_leases(now_ms, leases_scratch_))
      return err;
  }
  return {};
}

/// Acts on popped lease deadlines: a task still in flight with that
/// deadline (as committed) is redelivered later or dead-lettered.
core::error
shard_logic::impl::expire_leases(int64_t now_ms,
                                 const std::vector<core::timer_entry>& leases) {
  for (size_t i = 0; i < leases.size(); ++i) {
    const auto& lease = leases[i];
    std::optional<task_record> scratch;
    record_slot s;
    if (auto err = find(lease.id, scratch, s)) {
      // Nothing was acted upon from here on: those go back.
      leases_.put_back(std::span{leases}.subspan(i));
      return err;
    }
    leases_.consume(lease);
    // A staged change of the task tracks its lease at the commit.
    if (s.entry != nullptr || s.rec == nullptr ||
        s.rec->state != task_state::in_flight ||
        s.rec->lease_deadline_ms != lease.due_ms)
      continue;
    expire_lease(now_ms, s);
  }
  return {};
}

void shard_logic::impl::expire_lease(int64_t now_ms, record_slot& s) {
  auto before = storage::write_batch::key_of(*s.rec);
  ++pending_.lease_expired;
  stage(s, before, life_.expire_lease(*s.rec, now_ms), now_ms);
}

/// Acts on popped index entries: fires, tracks the leases of in-flight
/// tasks met again, parks, paces or skips stale ones.
core::error shard_logic::impl::process(int64_t now_ms,
                                       const std::vector<due_key>& keys,
                                       bool from_backlog) {
  if (auto err = fetch_records(keys, from_backlog))
    return err;
  // Backlog from before the shard started, and overdue beyond the
  // threshold: paced.
  auto late_before_ms = pacer_.late_before_ms(now_ms);
  for (const auto& key : keys)
    act_on(now_ms, key, from_backlog, late_before_ms);
  return {};
}

/// Gathers the records of `keys` that the batch does not stage: from the
/// record cache (taken out: a fire's commit caches the in-flight record
/// again; without one, the next look reads the store), else in one read.
core::error shard_logic::impl::fetch_records(const std::vector<due_key>& keys,
                                             bool from_backlog) {
  read_ids_.clear();
  fetched_.clear();
  clear_for_reuse(fetched_at_);
  cache_.prefetch(keys, [](const due_key& key) { return key.id; });
  for (const auto& key : keys) {
    if (batch_.contains(key.id) || fetched_at_.contains(key.id))
      continue;
    bool cached = cache_.take(key.id, [&](task_record&& rec) {
      fetched_at_.emplace(key.id, fetched_.size());
      fetched_.push_back(std::move(rec));
    });
    if (!cached)
      read_ids_.push_back(key.id);
  }
  if (read_ids_.empty())
    return {};
  auto got = store_.get_many(read_ids_);
  if (!got) {
    // Nothing was acted upon: the entries go back where they were.
    if (from_backlog)
      pacer_.put_back(keys);
    else
      for (const auto& key : keys)
        window_->on_put(key);
    return got.err();
  }
  for (auto& rec : *got) {
    unwritten_.complete_stored(rec);
    fetched_at_.emplace(rec.task.id, fetched_.size());
    fetched_.push_back(std::move(rec));
  }
  return {};
}

void shard_logic::impl::act_on(int64_t now_ms, const due_key& key,
                               bool from_backlog, int64_t late_before_ms) {
  record_slot s;
  if (!batch_.find(key.id, s))
    if (auto f = fetched_at_.find(key.id); f != fetched_at_.end()) {
      s.rec = &fetched_[f->second];
      s.base = storage::write_batch::key_of(*s.rec);
    }
  // Only an entry the store holds may go back to the window: a stale
  // one could hide the task's current entry.
  bool committed = s.base && *s.base == key;
  if (moved_to_index_time(now_ms, key, s))
    return;
  if (s.rec == nullptr || storage::write_batch::key_of(*s.rec) != key) {
    if (committed)
      batch_.consume(key); // Stale only because of staged writes.
    return;
  }
  if (s.rec->state == task_state::in_flight) {
    // Met again by a reload or after a restart: the lease is what
    // counts now (staged changes track theirs at the commit).
    if (s.entry == nullptr)
      track_met_lease(now_ms, *s.rec);
    if (committed)
      batch_.consume(key);
    keep_record(s);
    return;
  }
  const auto& topic = s.rec->task.topic;
  if (!parking_.open(topic)) {
    // An entry that only the staged batch holds comes back with the
    // commit (on_write), so it needs no parking.
    if (committed)
      parking_.park(key, topic);
    // Saturated (not without consumers): it fires again soon.
    if (parking_.available(topic))
      keep_record(s);
    return;
  }
  bool late = pacer_.late(key, late_before_ms);
  if (late && !from_backlog && pacer_.must_queue()) {
    if (committed && !pacer_.enqueue(key))
      window_->on_put(key);
    keep_record(s);
    return;
  }
  if (late)
    pacer_.spend_token();
  stage_fire(now_ms, key, s);
  if (committed)
    batch_.consume(key);
}

/// An older store's entry of an in-flight task at its lease deadline: it
/// moves to the index time (the record stays as it is) and the lease is
/// tracked. True if `key` was that.
bool shard_logic::impl::moved_to_index_time(int64_t now_ms, const due_key& key,
                                            record_slot& s) {
  if (s.rec == nullptr || s.entry != nullptr ||
      s.rec->state != task_state::in_flight ||
      key.index_ms != s.rec->lease_deadline_ms ||
      key == storage::write_batch::key_of(*s.rec))
    return false;
  track_met_lease(now_ms, *s.rec);
  batch_.replace(s, key);
  batch_.consume(key);
  return true;
}

void shard_logic::impl::stage_fire(int64_t now_ms, const due_key& key,
                                   record_slot& s) {
  auto& rec = *s.rec;
  life_.fire(rec, now_ms);
  // A first delivery may need no write: if the process dies before the
  // ack, the store still holds the task as pending, which fires it again
  // (at attempt 2, see unwritten_fires).
  bool unwritten = unwritten_.may_skip_write(rec, key, s.base);
  fires_.stage(fired_task{key, rec.fired_count, rec.task.attempt, unwritten});
  parking_.count_in_flight(key.id, rec.task.topic);
  ++pending_.fired;
  if (rec.task.attempt > 1)
    ++pending_.redelivered;
  if (unwritten)
    batch_.own(s);
  else
    batch_.replace(s, key);
}

/// When `fire` next looks ahead, given the window's next work at
/// `next_ms`: a lead before it, but no sooner than a quarter of the lead
/// after the last look, unless the work is due before that.
int64_t shard_logic::impl::look_ahead_at(int64_t next_ms) const noexcept {
  if (next_ms == never_ms)
    return never_ms;
  auto early_ms = saturating_add(next_ms, -opts_.fire_lead_ms);
  auto spaced_ms = saturating_add(looked_ahead_ms_,
                                  std::max<int64_t>(1, opts_.fire_lead_ms / 4));
  return std::max(early_ms, std::min(spaced_ms, next_ms));
}

int64_t shard_logic::impl::next_wakeup_ms() const {
  if ((parking_.reload_pending() && batch_.empty()) ||
      parking_.release_waiting())
    return core::min_time_ms;
  auto at = never_ms;
  // With a full backlog popping pauses: only a token brings progress.
  // With every topic closed it waits for the answer (a commit) or
  // announcement that opens one, or for a lease to run out.
  if (!pacer_.full() && !parking_.only_parks())
    at = opts_.fire_lead_ms > 0 ? look_ahead_at(window_->next_wakeup_ms())
                                : window_->next_wakeup_ms();
  if (!pacer_.empty())
    at = std::min(at, pacer_.next_token_ms());
  if (auto lease = leases_.next_due())
    at = std::min(at, *lease);
  return std::max(at, core::min_time_ms);
}

// -- commit -------------------------------------------------------------------

shard_logic::commit_result shard_logic::impl::commit(int64_t now_ms,
                                                     bool answers_waiting) {
  commit_result out;
  if (!store_.sync_pending())
    unwritten_.synced();
  if (batch_.empty() && !fires_.any_staged()) {
    out.err = sync_for_answers(answers_waiting);
    clear_staging();
    return out;
  }
  bool urgent = answers_waiting || unwritten_.must_sync(fires_.staged());
  batch_.writes().set_urgent(urgent);
  defer_new_index_entries();
  // Tasks indexed up to the horizon may fire without a write until the
  // next commit (see ShardMeta.fire_horizon_ms).
  auto horizon_ms = unwritten_fires::horizon_after(now_ms, opts_.fire_lead_ms);
  if (auto err = write(urgent, horizon_ms)) {
    roll_back();
    out.err = std::move(err);
    return out;
  }
  if (!batch_.empty()) {
    // A horizon that a power loss could take must not let tasks fire
    // without a write (see unwritten_fires).
    if (store_.sync_pending())
      unwritten_.note_unsynced(batch_.writes());
    else
      unwritten_.raise_durable_horizon(horizon_ms);
    ++counters_.commits;
  }
  apply_commit(now_ms, out.deliveries);
  return out;
}

/// Nothing staged: a reply must still not report what a power loss could
/// take.
core::error shard_logic::impl::sync_for_answers(bool answers_waiting) {
  if (!answers_waiting || !store_.sync_pending())
    return {};
  if (auto err = store_.sync())
    return err;
  unwritten_.synced();
  return {};
}

/// A new task at or before the window's cursor enters the heap with the
/// commit, so the store may defer its index entry: a task acked soon then
/// never touches the index.
void shard_logic::impl::defer_new_index_entries() {
  auto cursor = window_->cursor();
  for (auto& op : batch_.writes().ops())
    if (auto* put = std::get_if<storage::write_batch::put_op>(&op))
      put->defer_index = storage::write_batch::key_of(put->rec) <= cursor;
}

core::error shard_logic::impl::write(bool urgent, int64_t horizon_ms) {
  if (!batch_.empty()) {
    store_.raise_fire_horizon(horizon_ms);
    return store_.commit(batch_.writes());
  }
  // Nothing to write, but the fires must not rest on writes that a power
  // loss could take.
  if (urgent && store_.sync_pending())
    return store_.sync();
  return {};
}

/// The commit failed: every entry this batch took from the window or the
/// leases goes back, so both are as they were before the batch, and its
/// fires did not happen (each task was pending before).
void shard_logic::impl::roll_back() {
  for (const auto& key : batch_.consumed())
    window_->on_put(key);
  leases_.roll_back();
  for (const auto& f : fires_.staged())
    parking_.uncount_in_flight(f.key.id, *window_);
  ++counters_.commit_failures;
  clear_staging();
}

void shard_logic::impl::apply_commit(int64_t now_ms,
                                     std::vector<held_delivery>& deliveries) {
  // First, while the overlay still holds every fired record in full.
  build_deliveries(deliveries);
  // Before the batch's writes: a write of the same task supersedes what
  // this tracks (update_leases drops the mark).
  track_unwritten_fires();
  window_->on_write(batch_.writes());
  update_leases(now_ms);
  // A parked entry of a task this batch changed is stale: on_write has
  // just put the task's current entry (if any) in its place.
  if (parking_.any_parked())
    for (const auto& op : batch_.writes().ops())
      parking_.unpark(id_of(op));
  // After update_leases, which drops the holds this batch's writes
  // supersede.
  fires_.hold(deliveries);
  add_pending_counters();
  clear_staging();
}

/// Keeps the tracked leases and the record cache in line with a committed
/// batch; moves the records to cache out of the batch.
void shard_logic::impl::update_leases(int64_t now_ms) {
  auto hot_before_ms = saturating_add(now_ms, opts_.hot_horizon_ms);
  for (auto& op : batch_.writes().ops())
    settle_committed(op, hot_before_ms);
  cache_.shrink();
}

void shard_logic::impl::settle_committed(storage::write_batch::op& op,
                                         int64_t hot_before_ms) {
  if (auto* put = std::get_if<storage::write_batch::put_op>(&op);
      put != nullptr && put->rec.state == task_state::pending) {
    // A put is of a task this batch created (schedule), and it fires only
    // after the commit: nothing holds, leases, marks, counts or caches it
    // yet.
    [[maybe_unused]] auto id = put->rec.task.id;
    assert(!fires_.holds(id) && !unwritten_.marked(id) &&
           !leases_.contains(id) && !cache_.contains(id));
    if (put->rec.index_ms() <= hot_before_ms)
      cache_.remember_new(std::move(put->rec));
    return;
  }
  auto id = id_of(op);
  fires_.drop_hold(id);
  unwritten_.forget(id);
  task_record* after = nullptr;
  if (auto* x = std::get_if<storage::write_batch::replace_op>(&op))
    after = &x->after;
  else if (auto* y = std::get_if<storage::write_batch::put_op>(&op))
    after = &y->rec;
  if (after != nullptr && after->state == task_state::in_flight) {
    track_lease(*after);
    cache_.remember(std::move(*after));
  } else if (id != 0) {
    leases_.forget(id);
    parking_.uncount_in_flight(id, *window_);
    // Pending and due soon: cached, so that its fire needs no read.
    if (after != nullptr && after->index_ms() <= hot_before_ms)
      cache_.remember(std::move(*after));
    else
      cache_.forget(id);
  }
}

/// Tracks the committed batch's first deliveries that went out without a
/// write: their leases, their records in the cache and their marks.
void shard_logic::impl::track_unwritten_fires() {
  for (const auto& f : fires_.staged()) {
    if (!f.unwritten)
      continue;
    const auto& key = f.key;
    auto* entry = batch_.find(key.id);
    if (entry == nullptr || entry->what != staged_entry::kind::live)
      continue;
    const auto& rec = entry->rec;
    if (rec.state != task_state::in_flight || rec.task.attempt != 1)
      continue;
    window_->on_erase(key);
    track_lease(rec);
    unwritten_.mark(rec);
    // build_deliveries copied what the delivery needs of it.
    cache_.remember(std::move(entry->rec));
    entry->what = staged_entry::kind::erased;
  }
}

/// Builds the deliveries of the batch's committed fires. A first delivery
/// without a write copies the record's strings, since the record itself
/// moves on to the record cache (track_unwritten_fires); a written fire's
/// record is cached from the batch, so its strings move out of the
/// overlay.
void shard_logic::impl::build_deliveries(std::vector<held_delivery>& out) {
  out.reserve(fires_.staged().size());
  for (const auto& f : fires_.staged()) {
    auto* entry = batch_.find(f.key.id);
    if (entry == nullptr || entry->what != staged_entry::kind::live)
      continue; // Revoked before it went out.
    auto& rec = entry->rec;
    if (rec.state != task_state::in_flight || rec.fired_count != f.occurrence ||
        rec.task.attempt != f.attempt)
      continue;
    auto& item = out.emplace_back();
    item.release_ms = f.key.index_ms;
    auto& d = *item.delivery;
    auto* id = d.mutable_id();
    id->set_task_id(rec.task.id);
    id->set_occurrence(rec.fired_count);
    id->set_attempt(rec.task.attempt);
    d.set_due_ms(rec.task.due_ms);
    d.set_attempt(rec.task.attempt);
    d.set_lease_deadline_ms(rec.lease_deadline_ms);
    if (f.unwritten) {
      d.set_topic(rec.task.topic);
      d.set_payload(rec.task.payload);
    } else {
      d.set_topic(std::move(rec.task.topic));
      d.set_payload(std::move(rec.task.payload));
      entry->what = staged_entry::kind::erased;
    }
  }
}

void shard_logic::impl::add_pending_counters() {
  auto& c = counters_;
  const auto& p = pending_;
  c.scheduled += p.scheduled;
  c.fired += p.fired;
  c.acked += p.acked;
  c.nacked += p.nacked;
  c.redelivered += p.redelivered;
  c.lease_expired += p.lease_expired;
  c.dead_lettered += p.dead_lettered;
  c.revoked += p.revoked;
  c.kicked += p.kicked;
}

// -- construction -------------------------------------------------------------

shard_logic::shard_logic(storage::task_store& store, shard_options opts)
  : impl_(std::make_unique<impl>(store, std::move(opts))) {
  // nop
}

shard_logic::~shard_logic() {
  // A first delivery fired without a write, still held: the shard that
  // takes this one's place fires its task again at once, as attempt 2, and
  // this attempt 1, released at the same due time, could follow it
  // (simulator seed 3957860591663489509). A written fire's delivery still
  // goes out: its successor waits for the lease it committed.
  auto& s = *impl_;
  s.fires_.cancel_if(
    [&s](core::task_id id) { return s.unwritten_.marked(id); });
}

// -- requests -----------------------------------------------------------------

core::result<scheduled_task> shard_logic::schedule(int64_t now_ms,
                                                   core::task t) {
  auto& s = *impl_;
  if (auto err = t.validate(now_ms, s.limits()))
    return err;
  uint64_t digest = 0;
  if (t.idempotency_key) {
    digest = storage::content_digest(t);
    auto known = s.keys_.lookup(*t.idempotency_key, digest, now_ms);
    if (!known)
      return known.err();
    if (*known)
      return s.known_task(**known);
  }
  core::task_id id = 0;
  try {
    id = s.store_.allocate_id();
  } catch (const std::length_error& e) {
    return core::error{errc::store_unavailable, e.what()};
  }
  if (auto count = s.store_.meta().shard_count; count > 0)
    s.issued_below_ =
      std::max(s.issued_below_, core::local_id_of(id, count) + 1);
  task_record rec;
  rec.task = std::move(t);
  rec.task.id = id;
  rec.task.attempt = 0;
  auto due_ms = rec.task.due_ms;
  if (rec.task.idempotency_key)
    s.keys_.stage(*rec.task.idempotency_key, id, digest, now_ms, s.batch_);
  s.batch_.put(std::move(rec));
  ++s.pending_.scheduled;
  return scheduled_task{id, due_ms, true};
}

core::result<change_outcome> shard_logic::revoke(int64_t now_ms,
                                                 core::task_id id) {
  auto& s = *impl_;
  std::optional<task_record> scratch;
  record_slot found;
  if (auto err = s.find(id, scratch, found))
    return err;
  if (found.rec == nullptr)
    return s.absent_outcome(id, found);
  auto before = storage::write_batch::key_of(*found.rec);
  // A delivery fired in this batch, or held until its due time, has not
  // gone out yet: the revoke stops it (build_deliveries skips erased tasks,
  // a held one's hold is cancelled).
  bool running =
    found.rec->state == task_state::in_flight && !s.fires_.take_back(id);
  s.stage(found, before, s.life_.revoke(*found.rec), now_ms);
  ++s.pending_.revoked;
  return running ? change_outcome::in_flight : change_outcome::done;
}

core::result<change_outcome>
shard_logic::reschedule(int64_t now_ms, core::task_id id, int64_t due_ms) {
  auto& s = *impl_;
  if (auto err = check_due(now_ms, due_ms, s.limits()))
    return err;
  std::optional<task_record> scratch;
  record_slot found;
  if (auto err = s.find(id, scratch, found))
    return err;
  if (found.rec == nullptr)
    return s.absent_outcome(id, found);
  auto before = storage::write_batch::key_of(*found.rec);
  // Fired ahead of its due time and not sent: the fire is undone.
  if (found.rec->state == task_state::in_flight && !s.fires_.take_back(id))
    return change_outcome::in_flight;
  s.life_.reschedule(*found.rec, due_ms);
  s.batch_.replace(found, before);
  return change_outcome::done;
}

core::result<task_info> shard_logic::get(core::task_id id) {
  auto& s = *impl_;
  auto missing = [id] {
    return core::error{errc::not_found, "task " + std::to_string(id) +
                                          " is neither live nor dead"};
  };
  if (const auto* entry = s.batch_.find(id)) {
    switch (entry->what) {
      case staged_entry::kind::live:
        return task_info{entry->rec, false, {}};
      case staged_entry::kind::dead:
        return task_info{entry->rec, true, entry->dead_reason};
      case staged_entry::kind::erased:
        return missing();
    }
  }
  auto live = s.store_.get(id);
  if (!live)
    return live.err();
  if (*live) {
    s.unwritten_.complete_stored(**live);
    return task_info{std::move(**live), false, {}};
  }
  auto dead = s.store_.get_dead(id);
  if (!dead)
    return dead.err();
  if (*dead)
    return task_info{std::move((*dead)->record), true,
                     std::move((*dead)->reason)};
  return missing();
}

core::error shard_logic::ack(int64_t now_ms, const delivery_ref& d) {
  auto& s = *impl_;
  std::optional<task_record> scratch;
  record_slot found;
  if (auto err = s.find_current(d, scratch, found))
    return err;
  auto before = storage::write_batch::key_of(*found.rec);
  // A periodic task's next occurrence replaces this one in the same
  // atomic write.
  s.stage(found, before, s.life_.ack(*found.rec, now_ms), now_ms);
  ++s.pending_.acked;
  return {};
}

core::error shard_logic::nack(int64_t now_ms, const delivery_ref& d,
                              std::optional<int64_t> retry_in_ms) {
  auto& s = *impl_;
  if (retry_in_ms)
    if (auto err = check_delay("retry_in_ms", *retry_in_ms, s.limits()))
      return err;
  std::optional<task_record> scratch;
  record_slot found;
  if (auto err = s.find_current(d, scratch, found))
    return err;
  ++s.pending_.nacked;
  auto before = storage::write_batch::key_of(*found.rec);
  s.stage(found, before, s.life_.nack(*found.rec, now_ms, retry_in_ms), now_ms);
  return {};
}

core::result<int64_t> shard_logic::touch(int64_t now_ms, const delivery_ref& d,
                                         int64_t extend_ms) {
  auto& s = *impl_;
  if (auto err = check_delay("extend_ms", extend_ms, s.limits()))
    return err;
  std::optional<task_record> scratch;
  record_slot found;
  if (auto err = s.find_current(d, scratch, found))
    return err;
  auto before = storage::write_batch::key_of(*found.rec);
  s.life_.touch(*found.rec, now_ms, extend_ms);
  auto deadline_ms = found.rec->lease_deadline_ms;
  s.batch_.replace(found, before);
  return deadline_ms;
}

core::error shard_logic::requeue(int64_t now_ms, const delivery_ref& d) {
  auto& s = *impl_;
  std::optional<task_record> scratch;
  record_slot found;
  if (auto err = s.find_current(d, scratch, found))
    return err;
  auto before = storage::write_batch::key_of(*found.rec);
  s.stage(found, before, s.life_.requeue(*found.rec, now_ms), now_ms);
  return {};
}

core::error shard_logic::undelivered(int64_t, const delivery_ref& d) {
  auto& s = *impl_;
  std::optional<task_record> scratch;
  record_slot found;
  if (auto err = s.find_current(d, scratch, found))
    return err;
  auto before = storage::write_batch::key_of(*found.rec);
  s.life_.give_back(*found.rec);
  s.parking_.set_available(found.rec->task.topic, false, *s.window_);
  s.batch_.replace(found, before);
  return {};
}

core::result<dead_page> shard_logic::dead_letters(core::task_id after,
                                                  size_t limit) {
  auto& s = *impl_;
  if (limit == 0)
    limit = std::max<size_t>(s.opts_.dead_letter_page, 1);
  limit = std::min<size_t>(limit, std::numeric_limits<size_t>::max() / 2);
  // The batch's revivals hide as many of the store's; its burials join.
  auto extra = s.batch_.has_dead_changes() ? s.batch_.revived_from_store() : 0;
  auto got = s.store_.dead_letters(after, limit + 1 + extra);
  if (!got)
    return got.err();
  dead_page page;
  page.dead = std::move(*got);
  if (s.batch_.has_dead_changes())
    s.batch_.overlay_dead(page.dead, after);
  if (page.dead.size() > limit) {
    page.dead.resize(limit);
    page.next_after = page.dead.back().record.task.id;
  }
  return page;
}

core::result<change_outcome> shard_logic::kick(int64_t now_ms, core::task_id id,
                                               std::optional<int64_t> due_ms) {
  auto& s = *impl_;
  if (due_ms)
    if (auto err = check_due(now_ms, *due_ms, s.limits()))
      return err;
  task_record rec;
  staged_entry* entry = nullptr;
  if (auto* found = s.batch_.find(id)) {
    if (found->what != staged_entry::kind::dead)
      return change_outcome::not_found;
    entry = found;
    rec = std::move(entry->rec);
  } else {
    auto dead = s.store_.get_dead(id);
    if (!dead)
      return dead.err();
    if (!*dead)
      return change_outcome::not_found;
    rec = std::move((*dead)->record);
  }
  s.life_.kick(rec, now_ms, due_ms);
  s.batch_.revive(std::move(rec), entry);
  ++s.pending_.kicked;
  return change_outcome::done;
}

// -- consumers ----------------------------------------------------------------

void shard_logic::set_topic_available(const std::string& topic,
                                      bool available) {
  impl_->parking_.set_available(topic, available, *impl_->window_);
}

// -- timers -------------------------------------------------------------------

core::error shard_logic::fire(int64_t now_ms) {
  return impl_->fire(now_ms);
}

int64_t shard_logic::next_wakeup_ms() const {
  return impl_->next_wakeup_ms();
}

void shard_logic::wall_clock_stepped(int64_t now_ms, int64_t step_ms) {
  // Back: a delivery held for its due time gets its whole lease once the
  // clock reads that time again.
  impl_->leases_.shift(step_ms, [this, step_ms](core::task_id id) {
    return step_ms < 0 && impl_->fires_.waiting(id);
  });
  if (step_ms > 0)
    impl_->pacer_.clock_stepped(now_ms);
  // A delivery waiting for its due time is at no consumer, and after a
  // step back it waits that much longer: it no longer counts against its
  // topic's cap on unanswered deliveries, so that the topic's due work
  // does not wait behind it.
  if (step_ms < 0)
    impl_->fires_.for_each_waiting([this](core::task_id id) {
      impl_->parking_.uncount_in_flight(id, *impl_->window_);
    });
}

core::error shard_logic::write_failure() const {
  return impl_->store_.write_failure();
}

core::error shard_logic::maintain(int64_t now_ms) {
  auto& s = *impl_;
  if (auto err = s.keys_.expire(now_ms, expire_keys_per_maintain))
    return err;
  return s.store_.sync_if_due(now_ms);
}

// -- group commit -------------------------------------------------------------

bool shard_logic::dirty() const noexcept {
  return !impl_->batch_.empty() || impl_->fires_.any_staged();
}

bool shard_logic::sync_pending() const noexcept {
  return impl_->store_.sync_pending();
}

shard_logic::commit_result shard_logic::commit(int64_t now_ms,
                                               bool answers_waiting) {
  return impl_->commit(now_ms, answers_waiting);
}

void shard_logic::prefetch(std::span<const core::task_id> ids) const {
  impl_->cache_.prefetch(ids, [](core::task_id id) { return id; });
}

size_t shard_logic::cached_records() const noexcept {
  return impl_->cache_.size();
}

size_t shard_logic::record_cache_slots() const noexcept {
  return impl_->cache_.slots();
}

size_t shard_logic::held_size() const noexcept {
  return impl_->fires_.held();
}

// -- state --------------------------------------------------------------------

const shard_counters& shard_logic::counters() const noexcept {
  return impl_->counters_;
}

size_t shard_logic::window_size() const noexcept {
  return impl_->window_->size();
}

std::map<std::string, uint64_t> shard_logic::waiting() const {
  return impl_->parking_.waiting();
}

size_t shard_logic::backlog_size() const noexcept {
  return impl_->pacer_.size();
}

const shard_options& shard_logic::options() const noexcept {
  return impl_->opts_;
}

} // namespace dally::logic
