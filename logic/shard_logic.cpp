#include "logic/shard_logic.hpp"

#include <algorithm>
#include <cassert>
#include <iterator>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>

#include "core/quad_heap.hpp"
#include "core/time_range.hpp"
#include "storage/record_codec.hpp"

namespace dally::logic {

namespace {

using core::errc;
using storage::due_key;
using storage::task_record;
using storage::task_state;

constexpr int64_t never_ms = std::numeric_limits<int64_t>::max();

/// Gives `x` its default value in place, freeing what it held. `x = T{}`
/// would first zero-fill a temporary (value-initialization): a `rep stos`
/// over the whole record, most of what clearing a batch's staged entries
/// cost.
template<class T>
void reset_in_place(T& x) noexcept {
  static_assert(std::is_nothrow_default_constructible_v<T>);
  std::destroy_at(&x);
  ::new (static_cast<void*>(&x)) T;
}

/// Empties a flat table that every batch fills again, keeping its array:
/// abseil's clear() frees an array of more than 127 slots, and the next
/// batch would grow it from nothing, rehashing at every doubling. A table
/// a rare huge batch grew beyond `kept_slots` is freed all the same.
template<class Table>
void clear_for_reuse(Table& table) {
  constexpr size_t kept_slots = 8192;
  if (table.capacity() <= 127 || table.capacity() > kept_slots)
    table.clear();
  else
    table.erase(table.begin(), table.end());
}

/// Index slices a single `fire` may read, so that a long (re)load of the
/// window interleaves with requests.
constexpr size_t refill_slices_per_fire = 16;

/// Index entries handled per store read while firing.
constexpr size_t fire_chunk = 512;

/// How far past a commit (and the fire lead) its fire horizon reaches: a
/// shard without a commit for this long writes its next first delivery.
/// After a crash, the tasks indexed between the last commit and its
/// horizon that had not fired yet count one attempt as spent, so the step
/// is short; a shard under load commits far more often than this anyway.
constexpr int64_t fire_horizon_step_ms = 250;

/// Idempotency keys deleted per `maintain`.
constexpr size_t expire_keys_per_maintain = 4096;

int64_t saturating_add(int64_t x, int64_t y) noexcept {
  int64_t sum = 0;
  if (__builtin_add_overflow(x, y, &sum))
    return y > 0 ? std::numeric_limits<int64_t>::max()
                 : std::numeric_limits<int64_t>::min();
  return sum;
}

/// A record whose only purpose is to carry `key` into write_batch::replace,
/// which reads nothing of its `before` argument but the index entry.
task_record key_stub(const due_key& key) {
  task_record rec;
  rec.task.id = key.id;
  rec.task.due_ms = key.index_ms;
  return rec;
}

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

std::string attempt_text(const task_record& rec) {
  return std::to_string(rec.task.attempt) + " of " +
         std::to_string(rec.task.policy.max_attempts);
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

} // namespace

// -- state --------------------------------------------------------------------

struct shard_logic::impl {
  /// What the current batch did to a task: the overlay that lets reads see
  /// staged writes.
  struct staged_entry {
    enum class kind : uint8_t { live, erased, dead };
    kind what = kind::live;
    /// live: the staged record; dead: the buried one.
    task_record rec;
    /// The task's index entry in the store before this batch, if it had
    /// one: the entry a rollback hands back to the window.
    std::optional<due_key> base;
    int64_t dead_ms = 0;
    std::string dead_reason;
  };

  /// The batch's staged entries by task. Entries keep their address until
  /// clear() (slots point at them across inserts) and are reused by the
  /// batches after: a node map allocated a node per staged task, about
  /// three per task delivered (its put, its fire, its ack).
  class staged_overlay {
  public:
    staged_entry* find(core::task_id id) {
      auto it = index_.find(id);
      return it == index_.end() ? nullptr : it->second;
    }

    const staged_entry* find(core::task_id id) const {
      auto it = index_.find(id);
      return it == index_.end() ? nullptr : it->second;
    }

    bool contains(core::task_id id) const { return index_.contains(id); }

    /// The entry of `id`, default-constructed if the batch had none.
    staged_entry& operator[](core::task_id id) {
      auto [it, added] = index_.try_emplace(id, nullptr);
      if (added) {
        if (used_ == pool_.size())
          pool_.push_back(std::make_unique<staged_entry>());
        it->second = pool_[used_++].get();
      }
      return *it->second;
    }

    void clear() {
      for (size_t i = 0; i < used_; ++i)
        reset_in_place(*pool_[i]);
      used_ = 0;
      clear_for_reuse(index_);
      // What a rare huge batch staged is not kept.
      if (pool_.size() > kept_entries)
        pool_.resize(kept_entries);
    }

    /// Calls `f(id, entry)` for every staged entry, read-only.
    template<class F>
    void for_each(F&& f) const {
      for (const auto& [id, entry] : index_)
        f(id, static_cast<const staged_entry&>(*entry));
    }

  private:
    static constexpr size_t kept_entries = 4096;
    absl::flat_hash_map<core::task_id, staged_entry*> index_;
    std::vector<std::unique_ptr<staged_entry>> pool_;
    size_t used_ = 0;
  };

  /// A task's current record as a request or `fire` found it: staged (in
  /// the overlay) or freshly read from the store.
  struct slot {
    /// The live record, or null.
    task_record* rec = nullptr;
    /// The overlay entry, if the batch touched the task.
    staged_entry* entry = nullptr;
    /// The store's index entry for the task before this batch.
    std::optional<due_key> base;
  };

  /// A delivery staged by `fire`, built when the commit succeeds.
  struct fired_task {
    due_key key;
    uint64_t occurrence = 0;
    uint32_t attempt = 0;
    /// A first delivery that goes out without a write (stage_fire).
    bool unwritten = false;
  };

  /// Parked entries of one topic and whether a consumer can take them.
  struct topic_state {
    std::string name;
    bool available = false;
    /// Deliveries fired and not yet answered (staged fires included).
    uint64_t in_flight = 0;
    /// At max_unanswered_per_topic: parks like an unavailable topic until
    /// half of its deliveries have been answered.
    bool saturated = false;
    /// Entries dropped from memory since the last reload (still due).
    uint64_t dropped = 0;
    /// Parked index entries, earliest due first.
    std::set<due_key> parked;
    /// The fire pass of the last release (at most one per pass), and
    /// whether a release waits for the next pass.
    uint64_t released_in_pass = std::numeric_limits<uint64_t>::max();
    bool release_deferred = false;
  };

  impl(storage::task_store& store, shard_options opts)
    : store_(store), opts_(std::move(opts)) {
    opts_.fire_batch = std::max<size_t>(opts_.fire_batch, 1);
    opts_.max_backlog = std::max<size_t>(opts_.max_backlog, 1);
    opts_.window.max_in_memory =
      std::max<size_t>(opts_.window.max_in_memory, 1);
    window_ = std::make_unique<storage::due_window>(store_, opts_.window);
    const auto& meta = store_.meta();
    durable_horizon_ms_ = meta.fire_horizon_ms;
    recovered_horizon_ms_ = meta.fire_horizon_ms;
    first_new_local_id_ = meta.next_local_id;
  }

  // -- lookups ----------------------------------------------------------------

  const core::task_limits& limits() const noexcept { return opts_.limits; }

  /// The current record of `id`: staged, else copied from the record
  /// cache or read into `scratch`. Given `taken`, a cached record is moved
  /// out of the cache instead of copied, for a caller about to stage a
  /// change of it (its commit caches the result), and `*taken` tells.
  core::error find(core::task_id id, std::optional<task_record>& scratch,
                   slot& out, bool* taken = nullptr) {
    if (auto* entry = overlay_.find(id)) {
      out.entry = entry;
      out.base = entry->base;
      if (entry->what == staged_entry::kind::live)
        out.rec = &entry->rec;
      return {};
    }
    if (auto it = cached_.find(id); it != cached_.end()) {
      if (taken != nullptr) {
        cached_bytes_ -= footprint(*it->second);
        scratch = std::move(*it->second);
        cached_.erase(it);
        *taken = true;
      } else {
        scratch = *it->second;
      }
      out.rec = &*scratch;
      out.base = storage::write_batch::key_of(*scratch);
      return {};
    }
    auto got = store_.get(id);
    if (!got)
      return got.err();
    if (*got) {
      scratch = std::move(**got);
      complete_stored(*scratch);
      out.rec = &*scratch;
      out.base = storage::write_batch::key_of(*scratch);
    }
    return {};
  }

  /// The in-flight record that `d` names, else stale_delivery. Every
  /// caller stages a change of the record it finds, so a cached one is
  /// taken out of the cache rather than copied; a stale one goes back.
  core::error find_current(const delivery_ref& d,
                           std::optional<task_record>& scratch, slot& out) {
    bool taken = false;
    if (auto err = find(d.id, scratch, out, &taken))
      return err;
    auto put_back = [&](core::error err) {
      if (taken)
        remember(std::move(*scratch));
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
    if (meta.shard_count == 0 || id % meta.shard_count != meta.shard)
      return false;
    auto local = id / meta.shard_count;
    // Local id 0 is never handed out (see rocks_task_store::allocate_id).
    return local >= 1 && local < std::max(meta.next_local_id, issued_below_);
  }

  /// The outcome of a revoke or reschedule of a task that is not live.
  core::result<change_outcome> absent_outcome(core::task_id id, const slot& s) {
    if (s.entry != nullptr || issued(id))
      return change_outcome::completed;
    auto dead = store_.get_dead(id);
    if (!dead)
      return dead.err();
    return *dead ? change_outcome::completed : change_outcome::not_found;
  }

  // -- staging ----------------------------------------------------------------

  /// Makes the overlay own the slot's record (moving it out of scratch).
  staged_entry& own(slot& s) {
    if (s.entry != nullptr)
      return *s.entry;
    auto& entry = overlay_[s.rec->task.id];
    entry.what = staged_entry::kind::live;
    entry.rec = std::move(*s.rec);
    entry.base = s.base;
    s.entry = &entry;
    s.rec = &entry.rec;
    return entry;
  }

  /// Stages the slot's (modified) record, which was at `before`.
  void stage_replace(slot& s, const due_key& before) {
    batch_.replace(key_stub(before), *s.rec);
    own(s).what = staged_entry::kind::live;
  }

  void stage_erase(slot& s) {
    batch_.erase(*s.rec);
    auto& entry = own(s);
    entry.what = staged_entry::kind::erased;
    reset_in_place(entry.rec);
  }

  void stage_bury(slot& s, int64_t now_ms, std::string reason) {
    batch_.bury(*s.rec, now_ms, reason);
    auto& entry = own(s);
    entry.what = staged_entry::kind::dead;
    entry.dead_ms = now_ms;
    entry.dead_reason = std::move(reason);
    has_dead_changes_ = true;
  }

  void stage_put(task_record rec) {
    batch_.put(rec);
    auto& entry = overlay_[rec.task.id];
    entry.what = staged_entry::kind::live;
    entry.rec = std::move(rec);
    entry.base.reset();
  }

  /// Stages `rec` as the revived dead letter `id`; `entry` is its overlay
  /// entry when the batch buried it.
  void stage_revive(task_record rec, staged_entry* entry) {
    auto id = rec.task.id;
    batch_.revive(id, rec);
    if (entry == nullptr) {
      entry = &overlay_[id];
      entry->base.reset();
      ++revived_from_store_;
    }
    entry->what = staged_entry::kind::live;
    entry->rec = std::move(rec);
    entry->dead_ms = 0;
    entry->dead_reason.clear();
    has_dead_changes_ = true;
  }

  void clear_staging() {
    batch_.clear();
    overlay_.clear();
    keys_.clear();
    fired_.clear();
    clear_for_reuse(fired_ids_);
    consumed_.clear();
    leases_consumed_.clear();
    pending_ = shard_counters{};
    revived_from_store_ = 0;
    has_dead_changes_ = false;
  }

  // -- topics and parking -----------------------------------------------------

  topic_state& topic(const std::string& name) {
    auto [it, added] = topics_.try_emplace(name);
    if (added)
      it->second.name = name;
    return it->second;
  }

  /// Whether due tasks of `name` may fire now.
  bool topic_open(const std::string& name) const {
    auto it = topics_.find(name);
    return it != topics_.end() && it->second.available && !it->second.saturated;
  }

  /// Counts `id` as an unanswered delivery of its topic (once).
  void count_in_flight(core::task_id id, const std::string& topic_name) {
    auto [it, added] = in_flight_topics_.try_emplace(id, nullptr);
    if (!added)
      return;
    auto& ts = topic(topic_name);
    it->second = &ts;
    ++ts.in_flight;
    auto cap = opts_.max_unanswered_per_topic;
    if (cap > 0 && ts.in_flight >= cap)
      ts.saturated = true;
  }

  /// `id` is no longer in flight; its topic reopens at half its cap.
  void uncount_in_flight(core::task_id id) {
    auto it = in_flight_topics_.find(id);
    if (it == in_flight_topics_.end())
      return;
    auto& ts = *it->second;
    in_flight_topics_.erase(it);
    --ts.in_flight;
    if (ts.saturated && ts.in_flight <= opts_.max_unanswered_per_topic / 2)
      ts.saturated = false;
    if (!ts.saturated && ts.available)
      release_parked(ts);
  }

  void unpark(core::task_id id) {
    auto it = parked_index_.find(id);
    if (it == parked_index_.end())
      return;
    auto [ts, key] = it->second;
    ts->parked.erase(key);
    parked_index_.erase(it);
  }

  void park(const due_key& key, const std::string& topic_name) {
    unpark(key.id);
    auto& ts = topic(topic_name);
    ts.parked.insert(key);
    parked_index_.emplace(key.id, std::make_pair(&ts, key));
    // Beyond the bound, the topic's latest entries stay on disk only: the
    // earliest go back first, and the reload after the last of them finds
    // the rest in due order.
    while (parked_index_.size() > opts_.window.max_in_memory) {
      auto last = std::prev(ts.parked.end());
      parked_index_.erase(last->id);
      ts.parked.erase(last);
      ++ts.dropped;
    }
  }

  void set_topic_available(const std::string& name, bool available) {
    if (!available) {
      auto it = topics_.find(name);
      if (it == topics_.end())
        return; // Unknown topics are unavailable.
      auto& ts = it->second;
      ts.available = false;
      if (ts.parked.empty() && ts.dropped == 0 && ts.in_flight == 0)
        topics_.erase(it);
      return;
    }
    auto& ts = topic(name);
    ts.available = true;
    if (!ts.saturated)
      release_parked(ts);
  }

  /// Puts parked entries of an open topic back into the window, earliest
  /// due first: as many as its cap on unanswered deliveries leaves room
  /// for, once per fire pass. Releasing more would only park them again
  /// after reading their records, each time half the cap is answered: a
  /// shard behind on a busy topic did that for every parked task, fell
  /// further behind and never caught up.
  void release_parked(topic_state& ts) {
    if (ts.parked.empty() && ts.dropped == 0)
      return;
    // Released since the last pass: what that put back has not fired yet,
    // and whatever it left parked waits for the end of the next pass
    // (below), where the room is counted again.
    if (ts.released_in_pass == fire_passes_)
      return;
    auto cap = opts_.max_unanswered_per_topic;
    // No more than one pass pops: the rest would wait in the window
    // uncounted, and the next release would add more on top.
    auto room = std::min(ts.parked.size(), opts_.fire_batch);
    if (cap > 0)
      room =
        std::min<uint64_t>(room, cap > ts.in_flight ? cap - ts.in_flight : 0);
    if (room == 0 && !ts.parked.empty())
      return;
    ts.released_in_pass = fire_passes_;
    auto it = ts.parked.begin();
    for (; room > 0; --room, ++it) {
      const auto& key = *it;
      parked_index_.erase(key.id);
      // The window may hold a newer entry of the task (its record changed
      // while parked): never overwrite it with the parked one.
      if (!window_->contains(key.id))
        window_->on_put(key);
    }
    ts.parked.erase(ts.parked.begin(), it);
    if (ts.parked.empty() && ts.dropped > 0) {
      reload_pending_ = true;
      ts.dropped = 0;
    }
    // More waiting: the end of the next pass takes up the next lot, if the
    // topic has room then.
    if (!ts.parked.empty() && !ts.release_deferred) {
      ts.release_deferred = true;
      deferred_releases_.push_back(ts.name);
    }
  }

  /// A fresh window over the store: brings back every entry, those dropped
  /// from memory included, so parked and backlog state starts over.
  void reload() {
    window_ = std::make_unique<storage::due_window>(store_, opts_.window);
    parked_index_.clear();
    for (auto it = topics_.begin(); it != topics_.end();) {
      it->second.parked.clear();
      it->second.dropped = 0;
      if (it->second.available || it->second.in_flight > 0)
        ++it;
      else
        it = topics_.erase(it);
    }
    backlog_.clear();
    backlog_.shrink_to_fit();
    reload_pending_ = false;
  }

  // -- pacing -----------------------------------------------------------------

  bool pacing() const noexcept { return opts_.overdue_rate_per_s > 0; }

  int64_t bucket_capacity_milli() const noexcept {
    auto burst = std::max<int64_t>(opts_.overdue_rate_per_s / 10, 1);
    return burst * 1000;
  }

  /// Adds the tokens earned since the last call (in thousandths: the rate
  /// per second is exactly the thousandths earned per ms).
  void refill_tokens(int64_t now_ms) {
    if (!pacing())
      return;
    auto capacity = bucket_capacity_milli();
    if (!bucket_started_) {
      bucket_started_ = true;
      tokens_milli_ = capacity;
      tokens_at_ms_ = now_ms;
      return;
    }
    if (now_ms <= tokens_at_ms_) {
      // A clock that went back earns nothing and restarts from here.
      tokens_at_ms_ = now_ms;
      return;
    }
    int64_t earned = 0;
    if (__builtin_mul_overflow(now_ms - tokens_at_ms_,
                               int64_t{opts_.overdue_rate_per_s}, &earned) ||
        earned >= capacity)
      tokens_milli_ = capacity;
    else
      tokens_milli_ = std::min(capacity, tokens_milli_ + earned);
    tokens_at_ms_ = now_ms;
  }

  bool has_token() const noexcept { return tokens_milli_ >= 1000; }

  int64_t next_token_ms() const noexcept {
    if (has_token())
      return tokens_at_ms_;
    auto missing = 1000 - tokens_milli_;
    int64_t rate = opts_.overdue_rate_per_s;
    return saturating_add(tokens_at_ms_, (missing + rate - 1) / rate);
  }

  // -- firing -----------------------------------------------------------------

  core::error fire(int64_t now_ms) {
    ++fire_passes_;
    if (reload_pending_ && batch_.empty()) {
      // The fresh window reads every entry back from the index, those
      // whose writing commits deferred included.
      if (auto err = store_.index_deferred())
        return err;
      reload();
    }
    if (auto err = window_->refill(now_ms, refill_slices_per_fire))
      return err;
    refill_tokens(now_ms);
    if (!backlog_started_) {
      // What is overdue beyond the threshold now is the backlog of the time
      // the shard was down; only that is paced.
      backlog_started_ = true;
      backlog_before_ms_ = saturating_add(now_ms, -opts_.late_threshold_ms);
    }
    // Tasks due within the lead fire now and are held until due; tasks
    // already due always fire.
    auto horizon_ms = now_ms;
    if (opts_.fire_lead_ms > 0 &&
        now_ms >= look_ahead_at(window_->next_wakeup_ms())) {
      horizon_ms = saturating_add(now_ms, opts_.fire_lead_ms);
      looked_ahead_ms_ = now_ms;
    }
    auto budget = opts_.fire_batch;
    // The paced backlog first: it holds the oldest due work.
    while (budget > 0 && !backlog_.empty() && has_token()) {
      auto n = std::min({budget, backlog_.size(), fire_chunk,
                         static_cast<size_t>(tokens_milli_ / 1000)});
      keys_scratch_.assign(backlog_.begin(), backlog_.begin() + n);
      backlog_.erase(backlog_.begin(), backlog_.begin() + n);
      budget -= n;
      if (auto err = process(now_ms, keys_scratch_, true))
        return err;
    }
    while (budget > 0 && backlog_.size() < opts_.max_backlog) {
      keys_scratch_.clear();
      auto n = window_->pop_due(horizon_ms, std::min(budget, fire_chunk),
                                keys_scratch_);
      if (n == 0)
        break;
      budget -= n;
      if (auto err = process(now_ms, keys_scratch_, false))
        return err;
    }
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
    // Nothing staged: nothing to roll back either.
    // (Fires without a write stage no op but still need the commit.)
    if (batch_.empty() && fired_.empty()) {
      consumed_.clear();
      leases_consumed_.clear();
    }
    // After this pass's pops, so that what it fired counts against the
    // room; the next pass pops what these put back.
    release_deferred();
    return {};
  }

  void release_deferred() {
    if (deferred_releases_.empty())
      return;
    auto names = std::move(deferred_releases_);
    deferred_releases_.clear();
    for (const auto& name : names)
      if (auto t = topics_.find(name); t != topics_.end()) {
        t->second.release_deferred = false;
        if (t->second.available && !t->second.saturated)
          release_parked(t->second);
      }
  }

  /// Acts on popped lease deadlines: a task still in flight with that
  /// deadline (as committed) is redelivered later or dead-lettered.
  core::error expire_leases(int64_t now_ms,
                            const std::vector<core::timer_entry>& leases) {
    for (size_t i = 0; i < leases.size(); ++i) {
      const auto& lease = leases[i];
      std::optional<task_record> scratch;
      slot s;
      if (auto err = find(lease.id, scratch, s)) {
        // Nothing was acted upon from here on: those go back.
        for (size_t j = i; j < leases.size(); ++j)
          leases_.insert(leases[j].id, leases[j].due_ms);
        return err;
      }
      leases_consumed_.push_back(lease);
      // A staged change of the task tracks its lease at the commit.
      if (s.entry != nullptr || s.rec == nullptr ||
          s.rec->state != task_state::in_flight ||
          s.rec->lease_deadline_ms != lease.due_ms)
        continue;
      expire_lease(now_ms, s);
    }
    return {};
  }

  /// Tracks the lease of a committed in-flight record.
  void track_lease(const task_record& rec) {
    leases_.upsert(rec.task.id, rec.lease_deadline_ms);
    count_in_flight(rec.task.id, rec.task.topic);
  }

  /// Acts on popped index entries: fires, tracks the leases of in-flight
  /// tasks met again, parks, paces or skips stale ones.
  core::error process(int64_t now_ms, const std::vector<due_key>& keys,
                      bool from_backlog) {
    read_ids_.clear();
    fetched_.clear();
    clear_for_reuse(fetched_at_);
    prefetch_records(keys, [](const due_key& key) { return key.id; });
    for (const auto& key : keys) {
      if (overlay_.contains(key.id) || fetched_at_.contains(key.id))
        continue;
      if (auto it = cached_.find(key.id); it != cached_.end()) {
        // Taken out: a fire's commit caches the in-flight record again;
        // without one, the next look reads the store.
        cached_bytes_ -= footprint(*it->second);
        fetched_at_.emplace(key.id, fetched_.size());
        fetched_.push_back(std::move(*it->second));
        cached_.erase(it);
      } else {
        read_ids_.push_back(key.id);
      }
    }
    if (!read_ids_.empty()) {
      auto got = store_.get_many(read_ids_);
      if (!got) {
        // Nothing was acted upon: the entries go back where they were.
        if (from_backlog)
          backlog_.insert(backlog_.begin(), keys.begin(), keys.end());
        else
          for (const auto& key : keys)
            window_->on_put(key);
        return got.err();
      }
      for (auto& rec : *got) {
        complete_stored(rec);
        fetched_at_.emplace(rec.task.id, fetched_.size());
        fetched_.push_back(std::move(rec));
      }
    }
    // Backlog from before the shard started, and overdue beyond the
    // threshold: paced.
    auto late_before_ms = std::min(
      saturating_add(now_ms, -opts_.late_threshold_ms), backlog_before_ms_);
    for (const auto& key : keys) {
      slot s;
      // A committed record read for this entry and not acted upon goes
      // back to the cache: a parked or paced task comes back soon, and
      // reading it again is what made an overloaded shard slower still.
      auto keep_record = [&] {
        if (s.entry == nullptr && s.rec != nullptr)
          remember(std::move(*s.rec));
      };
      if (auto* entry = overlay_.find(key.id)) {
        s.entry = entry;
        s.base = entry->base;
        if (entry->what == staged_entry::kind::live)
          s.rec = &entry->rec;
      } else if (auto f = fetched_at_.find(key.id); f != fetched_at_.end()) {
        s.rec = &fetched_[f->second];
        s.base = storage::write_batch::key_of(*s.rec);
      }
      // Only an entry the store holds may go back to the window: a stale
      // one could hide the task's current entry.
      bool committed = s.base && *s.base == key;
      if (s.rec != nullptr && s.entry == nullptr &&
          s.rec->state == task_state::in_flight &&
          key.index_ms == s.rec->lease_deadline_ms &&
          key != storage::write_batch::key_of(*s.rec)) {
        // An older store's entry at the lease deadline: move it to the
        // index time (the record stays as it is) and track the lease.
        track_lease(*s.rec);
        stage_replace(s, key);
        consumed_.push_back(key);
        continue;
      }
      if (s.rec == nullptr || storage::write_batch::key_of(*s.rec) != key) {
        if (committed)
          consumed_.push_back(key); // Stale only because of staged writes.
        continue;
      }
      if (s.rec->state == task_state::in_flight) {
        // Met again by a reload or after a restart: the lease is what
        // counts now (staged changes track theirs at the commit).
        if (s.entry == nullptr)
          track_lease(*s.rec);
        if (committed)
          consumed_.push_back(key);
        keep_record();
        continue;
      }
      if (!topic_open(s.rec->task.topic)) {
        // An entry that only the staged batch holds comes back with the
        // commit (on_write), so it needs no parking.
        if (committed)
          park(key, s.rec->task.topic);
        // Saturated (not without consumers): it fires again soon.
        if (auto t = topics_.find(s.rec->task.topic);
            t != topics_.end() && t->second.available)
          keep_record();
        continue;
      }
      bool late = pacing() && key.index_ms < late_before_ms;
      if (late && !from_backlog && (!backlog_.empty() || !has_token())) {
        if (committed) {
          if (backlog_.size() < opts_.max_backlog)
            backlog_.push_back(key);
          else
            window_->on_put(key);
        }
        keep_record();
        continue;
      }
      if (late)
        tokens_milli_ -= 1000;
      stage_fire(now_ms, key, s);
      if (committed)
        consumed_.push_back(key);
    }
    return {};
  }

  void stage_fire(int64_t now_ms, const due_key& key, slot& s) {
    auto& rec = *s.rec;
    rec.state = task_state::in_flight;
    ++rec.task.attempt;
    // A task fired ahead of its time is delivered at its index time.
    rec.lease_deadline_ms =
      saturating_add(std::max(now_ms, key.index_ms), rec.task.policy.lease_ms);
    fired_.push_back(fired_task{key, rec.fired_count, rec.task.attempt});
    fired_ids_.insert(key.id);
    count_in_flight(key.id, rec.task.topic);
    ++pending_.fired;
    if (rec.task.attempt > 1)
      ++pending_.redelivered;
    if (rec.task.attempt == 1 && rec.task.policy.max_attempts > 1 &&
        key.index_ms <= durable_horizon_ms_ && s.base && *s.base == key) {
      // A first delivery needs no write: if the process dies before the
      // ack, the store still holds the task as pending, which fires it
      // again (at attempt 2, see maybe_fired_before_restart). That saves a
      // record rewrite, and often the whole commit, per delivered task.
      own(s);
      fired_.back().unwritten = true;
      return;
    }
    stage_replace(s, key);
  }

  /// Whether the stored, pending `rec` may have been delivered by an
  /// earlier run whose first delivery went out without a write.
  bool maybe_fired_before_restart(const task_record& rec) const {
    if (rec.task.attempt != 0 || rec.state != task_state::pending ||
        rec.task.policy.max_attempts <= 1 ||
        rec.index_ms() > recovered_horizon_ms_)
      return false;
    // Tasks created since the restart were not there to fire.
    auto count = store_.meta().shard_count;
    return count == 0 || rec.task.id / count < first_new_local_id_;
  }

  /// Completes a record read from the store with what only memory knows:
  /// the first delivery that went out without a write, if `rec` is that
  /// task's record; else, after a restart, the first attempt an earlier
  /// run may have spent that way, so that no redelivery repeats one.
  void complete_stored(task_record& rec) const {
    auto it = unwritten_fires_.find(rec.task.id);
    if (it == unwritten_fires_.end()) {
      if (maybe_fired_before_restart(rec))
        rec.task.attempt = 1;
      return;
    }
    const auto& mark = it->second;
    // Every write of the task drops its mark, so the record is as fired.
    bool as_fired = rec.state == task_state::pending &&
                    rec.fired_count == mark.occurrence &&
                    rec.task.attempt + 1 == mark.attempt;
    assert(as_fired);
    if (!as_fired)
      return;
    rec.state = task_state::in_flight;
    rec.task.attempt = mark.attempt;
    rec.lease_deadline_ms = mark.lease_deadline_ms;
  }

  void expire_lease(int64_t now_ms, slot& s) {
    auto& rec = *s.rec;
    auto before = storage::write_batch::key_of(rec);
    ++pending_.lease_expired;
    if (rec.task.attempt >= rec.task.policy.max_attempts) {
      ++pending_.dead_lettered;
      stage_bury(s, now_ms, "lease expired on attempt " + attempt_text(rec));
      return;
    }
    rec.state = task_state::pending;
    rec.lease_deadline_ms = 0;
    rec.retry_at_ms =
      saturating_add(now_ms, rec.task.policy.backoff_ms(rec.task.attempt));
    stage_replace(s, before);
  }

  // -- commit -----------------------------------------------------------------

  commit_result commit(int64_t now_ms, bool answers_waiting) {
    commit_result out;
    if (!store_.sync_pending())
      unsynced_ids_.clear();
    if (batch_.empty() && fired_.empty()) {
      // A reply must not report what a power loss could still take.
      if (answers_waiting && store_.sync_pending()) {
        if (auto err = store_.sync())
          out.err = std::move(err);
        else
          unsynced_ids_.clear();
      }
      clear_staging();
      return out;
    }
    bool urgent = answers_waiting || must_sync_fires();
    batch_.set_urgent(urgent);
    // A new task at or before the window's cursor enters the heap with the
    // commit, so the store may defer its index entry: a task acked soon
    // then never touches the index.
    auto cursor = window_->cursor();
    for (auto& op : batch_.ops())
      if (auto* put = std::get_if<storage::write_batch::put_op>(&op))
        put->defer_index = storage::write_batch::key_of(put->rec) <= cursor;
    // Tasks indexed up to the horizon may fire without a write until the
    // next commit (see ShardMeta.fire_horizon_ms).
    auto horizon_ms = saturating_add(
      now_ms, saturating_add(opts_.fire_lead_ms, fire_horizon_step_ms));
    if (!batch_.empty())
      store_.raise_fire_horizon(horizon_ms);
    core::error err;
    if (!batch_.empty())
      err = store_.commit(batch_);
    else if (urgent && store_.sync_pending())
      // Nothing to write, but the fires must not rest on writes that a
      // power loss could take.
      err = store_.sync();
    if (err) {
      // Every entry this batch took from the window or the leases goes
      // back: both are as they were before the batch.
      for (const auto& key : consumed_)
        window_->on_put(key);
      for (const auto& lease : leases_consumed_)
        if (!leases_.contains(lease.id))
          leases_.insert(lease.id, lease.due_ms);
      // The batch's fires did not happen (each task was pending before).
      for (const auto& f : fired_)
        uncount_in_flight(f.key.id);
      ++counters_.commit_failures;
      clear_staging();
      out.err = std::move(err);
      return out;
    }
    if (!batch_.empty()) {
      // A horizon that a power loss could take must not let tasks fire
      // without a write (see maybe_fired_before_restart).
      if (store_.sync_pending())
        note_unsynced_records();
      else
        durable_horizon_ms_ = std::max(durable_horizon_ms_, horizon_ms);
      ++counters_.commits;
    }
    // First, while the overlay still holds every fired record in full.
    build_deliveries(out.deliveries);
    // Before the batch's writes: a write of the same task supersedes what
    // this tracks (update_leases drops the mark).
    track_unwritten_fires();
    window_->on_write(batch_);
    update_leases(now_ms);
    // A parked entry of a task this batch changed is stale: on_write has
    // just put the task's current entry (if any) in its place.
    if (!parked_index_.empty())
      for (const auto& op : batch_.ops())
        unpark(id_of(op));
    hold_deliveries(out.deliveries);
    add_pending_counters();
    clear_staging();
    return out;
  }

  /// Whether the staged fires need the batch fsync'd before they go out: a
  /// written fire does (a power loss would repeat its attempt), and so
  /// does a first delivery without a write of a task whose stored record
  /// still waits for its fsync (a power loss would repeat the delivery of
  /// an occurrence the record made due, at the same attempt).
  bool must_sync_fires() const {
    for (const auto& f : fired_)
      if (!f.unwritten || unsynced_ids_.contains(f.key.id))
        return true;
    return false;
  }

  /// After a commit that waits for its fsync: the tasks it left a live
  /// record of, for must_sync_fires.
  void note_unsynced_records() {
    for (const auto& op : batch_.ops()) {
      if (auto* x = std::get_if<storage::write_batch::replace_op>(&op))
        unsynced_ids_.insert(x->after.task.id);
      else if (auto* y = std::get_if<storage::write_batch::put_op>(&op))
        unsynced_ids_.insert(y->rec.task.id);
      else if (auto* z = std::get_if<storage::write_batch::revive_op>(&op))
        unsynced_ids_.insert(z->rec.task.id);
    }
  }

  /// Keeps the tracked leases and the record cache in line with a
  /// committed batch; moves the records to cache out of the batch.
  void update_leases(int64_t now_ms) {
    auto hot_before_ms = saturating_add(now_ms, opts_.hot_horizon_ms);
    for (auto& op : batch_.ops()) {
      if (auto* put = std::get_if<storage::write_batch::put_op>(&op);
          put != nullptr && put->rec.state == task_state::pending) {
        // A put is of a task this batch created (schedule), and it fires
        // only after the commit: nothing holds, leases, marks, counts or
        // caches it yet, so none of the probes below could hit.
        [[maybe_unused]] auto id = put->rec.task.id;
        assert(!holds_.contains(id) && !unwritten_fires_.contains(id) &&
               !leases_.contains(id) && !in_flight_topics_.contains(id) &&
               !cached_.contains(id));
        if (put->rec.index_ms() <= hot_before_ms)
          remember_new(std::move(put->rec));
        continue;
      }
      // A newer write of the task supersedes its delivery's hold: a revoke
      // or reschedule cancelled it when staged, a settle follows its
      // release.
      if (!holds_.empty())
        holds_.erase(id_of(op));
      if (!unwritten_fires_.empty())
        unwritten_fires_.erase(id_of(op));
      task_record* after = nullptr;
      if (auto* x = std::get_if<storage::write_batch::replace_op>(&op))
        after = &x->after;
      else if (auto* y = std::get_if<storage::write_batch::put_op>(&op))
        after = &y->rec;
      if (after != nullptr && after->state == task_state::in_flight) {
        track_lease(*after);
        remember(std::move(*after));
      } else if (auto id = id_of(op); id != 0) {
        leases_.erase(id);
        uncount_in_flight(id);
        // Pending and due soon: cached, so that its fire needs no read.
        if (after != nullptr && after->index_ms() <= hot_before_ms)
          remember(std::move(*after));
        else
          forget(id);
      }
    }
    shrink_cache();
  }

  /// Tracks the committed batch's first deliveries that went out without
  /// a write: their leases, their records in the cache and their marks.
  void track_unwritten_fires() {
    for (const auto& f : fired_) {
      if (!f.unwritten)
        continue;
      const auto& key = f.key;
      auto* entry = overlay_.find(key.id);
      if (entry == nullptr || entry->what != staged_entry::kind::live)
        continue;
      const auto& rec = entry->rec;
      if (rec.state != task_state::in_flight || rec.task.attempt != 1)
        continue;
      window_->on_erase(key);
      track_lease(rec);
      unwritten_fires_.insert_or_assign(
        key.id,
        fire_mark{rec.fired_count, rec.task.attempt, rec.lease_deadline_ms});
      // build_deliveries copied what the delivery needs of it.
      remember(std::move(entry->rec));
      entry->what = staged_entry::kind::erased;
    }
  }

  /// A record's allocation rounded up to the allocator's size class, and
  /// the table's slot (id and pointer, 16 bytes), which grows by doubling
  /// at 7/8 full, so a used slot comes with about half a free one, plus
  /// control bytes.
  static constexpr size_t cache_entry_overhead = 64 + 24;
  /// A parsed cron expression's tables and strings, about.
  static constexpr size_t cron_overhead = sizeof(core::cron_expression) + 64;

  /// What a cached record counts against record_cache_bytes (about).
  static size_t footprint(const task_record& rec) {
    const auto& t = rec.task;
    const auto& r = t.recurrence;
    return sizeof(task_record) + cache_entry_overhead + t.topic.size() +
           t.payload.size() +
           (t.idempotency_key ? t.idempotency_key->size() : 0) +
           r.intervals_ms().size() * sizeof(int64_t) +
           (r.cron_expr() != nullptr ? cron_overhead : 0);
  }

  /// Loads the cached records of the tasks in `ids` (their ids through
  /// `id_of`) into the CPU's caches: first the table's slots of all of
  /// them, then the records, so that their misses overlap. A shard's cache
  /// holds tens of thousands of records, and a fire or a batch of verdicts
  /// visits them in an order unrelated to their addresses.
  template<class Range, class IdOf>
  void prefetch_records(const Range& ids, IdOf id_of) const {
    if (cached_.empty())
      return;
    for (const auto& x : ids)
      cached_.prefetch(id_of(x));
    for (const auto& x : ids) {
      auto it = cached_.find(id_of(x));
      if (it == cached_.end())
        continue;
      const auto* bytes = reinterpret_cast<const char*>(it->second.get());
      for (size_t i = 0; i < sizeof(task_record); i += 64)
        __builtin_prefetch(bytes + i);
    }
  }

  /// Caches the committed record `rec` (the last one of its task wins), if
  /// it fits.
  void remember(task_record&& rec) {
    auto it = cached_.find(rec.task.id);
    if (it == cached_.end()) {
      remember_new(std::move(rec));
      return;
    }
    // In place: the allocation stays, none is made.
    auto old_size = footprint(*it->second);
    auto size = footprint(rec);
    if (cached_bytes_ - old_size + size > opts_.record_cache_bytes) {
      cached_bytes_ -= old_size;
      cached_.erase(it);
      return;
    }
    cached_bytes_ += size - old_size;
    *it->second = std::move(rec);
  }

  /// remember() of a record whose task the cache does not hold.
  void remember_new(task_record&& rec) {
    auto id = rec.task.id;
    auto size = footprint(rec);
    if (cached_bytes_ + size > opts_.record_cache_bytes)
      return;
    cached_bytes_ += size;
    cached_.emplace(id, std::make_unique<task_record>(std::move(rec)));
  }

  void forget(core::task_id id) {
    if (auto it = cached_.find(id); it != cached_.end()) {
      cached_bytes_ -= footprint(*it->second);
      cached_.erase(it);
    }
  }

  /// The table keeps its slot array after erases: once it is mostly empty
  /// (a burst has passed), it is rebuilt to fit, so an idle shard gives the
  /// memory back. The rebuild moves pointers, not records.
  void shrink_cache() {
    constexpr size_t min_capacity = 1024;
    if (cached_.capacity() > min_capacity &&
        cached_.size() < cached_.capacity() / 8)
      cached_.rehash(0);
  }

  /// Builds the deliveries of the batch's committed fires. A first
  /// delivery without a write copies the record's strings, since the record
  /// itself moves on to the record cache (track_unwritten_fires); a written
  /// fire's record is cached from the batch, so its strings move out of the
  /// overlay.
  void build_deliveries(std::vector<held_delivery>& out) {
    out.reserve(fired_.size());
    for (const auto& f : fired_) {
      auto* entry = overlay_.find(f.key.id);
      if (entry == nullptr || entry->what != staged_entry::kind::live)
        continue; // Revoked before it went out.
      auto& rec = entry->rec;
      if (rec.state != task_state::in_flight ||
          rec.fired_count != f.occurrence || rec.task.attempt != f.attempt)
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

  /// Gives each built delivery a hold that its release claims and a revoke
  /// or reschedule may cancel first. After update_leases, which drops the
  /// holds that this batch's writes supersede.
  void hold_deliveries(std::vector<held_delivery>& out) {
    if (out.empty())
      return;
    // One block for the batch's holds, which share it: it goes once the
    // last of them is dropped.
    std::shared_ptr<delivery_hold[]> block{new delivery_hold[out.size()]};
    size_t used = 0;
    for (auto& item : out) {
      item.hold = std::shared_ptr<delivery_hold>(block, &block[used++]);
      holds_.insert_or_assign(item.delivery->id().task_id(), item.hold);
    }
  }

  /// Whether `id` was fired and has not gone out yet: staged in this batch,
  /// or committed with its hold still pending. Changes nothing.
  bool unsent(core::task_id id) const {
    if (fired_ids_.contains(id))
      return true;
    auto it = holds_.find(id);
    return it != holds_.end() && it->second->pending();
  }

  /// Makes sure `id`'s delivery never goes out, if it has not gone out
  /// yet: a fire staged in this batch is dropped at the commit, a held
  /// delivery's hold is cancelled now (so this holds even if the batch's
  /// commit fails: the task then comes back after its lease). False when
  /// the delivery is out (or was never fired).
  bool take_back(core::task_id id) {
    if (fired_ids_.contains(id))
      return true;
    auto it = holds_.find(id);
    return it != holds_.end() && it->second->cancel();
  }

  /// When `fire` next looks ahead, given the window's next work at
  /// `next_ms`: a lead before it, but no sooner than a quarter of the lead
  /// after the last look, unless the work is due before that.
  int64_t look_ahead_at(int64_t next_ms) const noexcept {
    if (next_ms == never_ms)
      return never_ms;
    auto early_ms = saturating_add(next_ms, -opts_.fire_lead_ms);
    auto spaced_ms = saturating_add(
      looked_ahead_ms_, std::max<int64_t>(1, opts_.fire_lead_ms / 4));
    return std::max(early_ms, std::min(spaced_ms, next_ms));
  }

  void add_pending_counters() {
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

  int64_t next_wakeup_ms() const {
    if ((reload_pending_ && batch_.empty()) || !deferred_releases_.empty())
      return core::min_time_ms;
    auto at = never_ms;
    // With a full backlog popping pauses: only a token brings progress.
    if (backlog_.size() < opts_.max_backlog)
      at = opts_.fire_lead_ms > 0 ? look_ahead_at(window_->next_wakeup_ms())
                                  : window_->next_wakeup_ms();
    if (!backlog_.empty())
      at = std::min(at, next_token_ms());
    if (auto lease = leases_.next_due())
      at = std::min(at, *lease);
    return std::max(at, core::min_time_ms);
  }

  // -- members ----------------------------------------------------------------

  storage::task_store& store_;
  shard_options opts_;
  /// A planted bug that acts once has acted (see planted_bug).
  bool planted_spent_ = false;
  std::unique_ptr<storage::due_window> window_;

  /// The batch and its overlay.
  storage::write_batch batch_;
  staged_overlay overlay_;
  std::unordered_map<std::string, storage::idempotency_entry> keys_;
  std::vector<fired_task> fired_;
  absl::flat_hash_set<core::task_id> fired_ids_;
  /// The holds of committed deliveries, by task, until a newer write of
  /// the task commits (see take_back).
  absl::flat_hash_map<core::task_id, std::shared_ptr<delivery_hold>> holds_;
  /// When `fire` last looked ahead.
  int64_t looked_ahead_ms_ = core::min_time_ms;
  /// Store-held entries taken from the window or the backlog and acted
  /// upon in this batch: a rollback hands them back.
  std::vector<due_key> consumed_;
  /// Lease deadlines of committed in-flight tasks (the due index keeps
  /// their entries at the index time).
  core::quad_heap leases_;
  /// Committed records of in-flight tasks and of tasks due soon (see
  /// record_cache_bytes); every commit updates or drops the entries of the
  /// tasks it wrote. Records live in allocations of their own: a table of
  /// them inline (256 bytes a slot) faulted in megabytes of fresh pages at
  /// every doubling and moved every record at every rehash, a commit
  /// stalled for tens of ms each time the cache grew or shrank
  /// (docs/benchmarks.md). The slots hold the ids, so a lookup touches a
  /// record only to use it, and prefetch_records can start a batch's
  /// record loads together.
  absl::flat_hash_map<core::task_id, std::unique_ptr<task_record>> cached_;
  size_t cached_bytes_ = 0;
  /// Leases popped in this batch: a rollback hands them back.
  std::vector<core::timer_entry> leases_consumed_;
  /// Counter increments that the next commit makes real.
  shard_counters pending_;
  /// Dead letters of the store revived in this batch.
  size_t revived_from_store_ = 0;
  bool has_dead_changes_ = false;

  /// Local ids below this were handed out by this instance.
  uint64_t issued_below_ = 0;

  shard_counters counters_;

  /// Topics known to have a consumer, or with parked entries.
  std::unordered_map<std::string, topic_state> topics_;
  /// The topic of each task in flight (its count is in topic_state).
  absl::flat_hash_map<core::task_id, topic_state*> in_flight_topics_;
  absl::flat_hash_map<core::task_id, std::pair<topic_state*, due_key>>
    parked_index_;
  /// Fire passes so far (a topic releases parked entries once per pass).
  uint64_t fire_passes_ = 0;
  /// Topics whose release waits for the next fire pass.
  std::vector<std::string> deferred_releases_;
  bool reload_pending_ = false;

  /// Overdue entries waiting for a token, in due order.
  std::deque<due_key> backlog_;
  bool bucket_started_ = false;
  /// What a first delivery without a write changed of the stored record,
  /// by task, until the next write of the task: every read of the store
  /// applies it.
  struct fire_mark {
    uint64_t occurrence = 0;
    uint32_t attempt = 0;
    int64_t lease_deadline_ms = 0;
  };
  absl::flat_hash_map<core::task_id, fire_mark> unwritten_fires_;
  /// The fire horizon of the last commit a power loss cannot take: tasks
  /// indexed up to it may fire without a write.
  int64_t durable_horizon_ms_ = 0;
  /// Tasks whose live record a commit that waits for its fsync wrote (see
  /// storage::write_batch::urgent); empty once the store has synced.
  absl::flat_hash_set<core::task_id> unsynced_ids_;
  /// The fire horizon the store was opened with: its pending tasks at
  /// attempt 0 indexed up to it may have been delivered by the last run.
  int64_t recovered_horizon_ms_ = 0;
  /// Local ids from here on were created since the store was opened.
  uint64_t first_new_local_id_ = 0;
  /// Entries due before this (set by the first fire) are the backlog of the
  /// downtime before the shard started.
  bool backlog_started_ = false;
  int64_t backlog_before_ms_ = std::numeric_limits<int64_t>::max();
  int64_t tokens_milli_ = 0;
  int64_t tokens_at_ms_ = 0;

  /// Scratch space of `fire`, kept to save allocations.
  std::vector<due_key> keys_scratch_;
  std::vector<core::timer_entry> leases_scratch_;
  std::vector<core::task_id> read_ids_;
  std::vector<task_record> fetched_;
  absl::flat_hash_map<core::task_id, size_t> fetched_at_;
};

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
  for (const auto& [id, hold] : impl_->holds_)
    if (impl_->unwritten_fires_.contains(id))
      hold->cancel();
}

// -- requests -----------------------------------------------------------------

core::result<scheduled_task> shard_logic::schedule(int64_t now_ms,
                                                   core::task t) {
  auto& s = *impl_;
  if (auto err = t.validate(now_ms, s.limits()))
    return err;
  uint64_t digest = 0;
  if (t.idempotency_key) {
    const auto& key = *t.idempotency_key;
    digest = storage::content_digest(t);
    std::optional<storage::idempotency_entry> known;
    if (auto it = s.keys_.find(key); it != s.keys_.end()) {
      known = it->second;
    } else {
      auto found = s.store_.find_key(key, now_ms);
      if (!found)
        return found.err();
      known = *found;
    }
    if (known) {
      if (known->digest != digest)
        return core::error{errc::idempotency_conflict,
                           "the idempotency key names task " +
                             std::to_string(known->task_id) +
                             ", scheduled with another topic or payload"};
      scheduled_task out{known->task_id, 0, false};
      std::optional<task_record> scratch;
      impl::slot found;
      if (auto err = s.find(known->task_id, scratch, found))
        return err;
      if (found.rec != nullptr)
        out.due_ms = found.rec->task.due_ms;
      return out;
    }
  }
  core::task_id id = 0;
  try {
    id = s.store_.allocate_id();
  } catch (const std::length_error& e) {
    return core::error{errc::store_unavailable, e.what()};
  }
  if (auto count = s.store_.meta().shard_count; count > 0)
    s.issued_below_ = std::max(s.issued_below_, id / count + 1);
  if (s.opts_.plant == planted_bug::lose_ack && !s.planted_spent_) {
    s.planted_spent_ = true;
    return scheduled_task{id, t.due_ms, true};
  }
  task_record rec;
  rec.task = std::move(t);
  rec.task.id = id;
  rec.task.attempt = 0;
  auto due_ms = rec.task.due_ms;
  if (rec.task.idempotency_key) {
    storage::idempotency_entry entry{
      id, saturating_add(now_ms, s.opts_.key_retention_ms), digest};
    s.keys_.insert_or_assign(*rec.task.idempotency_key, entry);
    s.batch_.put_key(*rec.task.idempotency_key, entry);
  }
  s.stage_put(std::move(rec));
  ++s.pending_.scheduled;
  return scheduled_task{id, due_ms, true};
}

core::result<change_outcome> shard_logic::revoke(int64_t, core::task_id id) {
  auto& s = *impl_;
  std::optional<task_record> scratch;
  impl::slot found;
  if (auto err = s.find(id, scratch, found))
    return err;
  if (found.rec == nullptr)
    return s.absent_outcome(id, found);
  bool in_flight = found.rec->state == task_state::in_flight;
  if (s.opts_.plant == planted_bug::deliver_after_revoke && !s.planted_spent_ &&
      !(in_flight && !s.unsent(id))) {
    s.planted_spent_ = true;
    return change_outcome::done;
  }
  // A delivery fired in this batch, or held until its due time, has not
  // gone out yet: the revoke stops it (build_deliveries skips erased tasks,
  // a held one's hold is cancelled).
  bool running = in_flight && !s.take_back(id);
  s.stage_erase(found);
  ++s.pending_.revoked;
  return running ? change_outcome::in_flight : change_outcome::done;
}

core::result<change_outcome>
shard_logic::reschedule(int64_t now_ms, core::task_id id, int64_t due_ms) {
  auto& s = *impl_;
  if (auto err = check_due(now_ms, due_ms, s.limits()))
    return err;
  std::optional<task_record> scratch;
  impl::slot found;
  if (auto err = s.find(id, scratch, found))
    return err;
  if (found.rec == nullptr)
    return s.absent_outcome(id, found);
  auto before = storage::write_batch::key_of(*found.rec);
  if (found.rec->state == task_state::in_flight) {
    if (!s.take_back(id))
      return change_outcome::in_flight;
    // Fired ahead of its due time and not sent: the fire is undone.
    auto& rec = *found.rec;
    rec.state = task_state::pending;
    rec.lease_deadline_ms = 0;
    --rec.task.attempt;
  }
  found.rec->task.due_ms = due_ms;
  found.rec->retry_at_ms = 0;
  s.stage_replace(found, before);
  return change_outcome::done;
}

core::result<task_info> shard_logic::get(core::task_id id) {
  auto& s = *impl_;
  auto missing = [id] {
    return core::error{errc::not_found, "task " + std::to_string(id) +
                                          " is neither live nor dead"};
  };
  if (const auto* found = s.overlay_.find(id)) {
    const auto& entry = *found;
    switch (entry.what) {
      case impl::staged_entry::kind::live:
        return task_info{entry.rec, false, {}};
      case impl::staged_entry::kind::dead:
        return task_info{entry.rec, true, entry.dead_reason};
      case impl::staged_entry::kind::erased:
        return missing();
    }
  }
  auto live = s.store_.get(id);
  if (!live)
    return live.err();
  if (*live) {
    s.complete_stored(**live);
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
  impl::slot found;
  if (auto err = s.find_current(d, scratch, found))
    return err;
  auto& rec = *found.rec;
  std::optional<int64_t> next;
  if (rec.task.recurrence.is_periodic())
    next = rec.task.recurrence.next_after_completion(rec.task.due_ms, now_ms,
                                                     rec.fired_count + 1);
  if (next) {
    // The next occurrence replaces this one in the same atomic write.
    auto before = storage::write_batch::key_of(rec);
    rec.state = task_state::pending;
    rec.task.due_ms = *next;
    rec.task.attempt = 0;
    rec.fired_count += 1;
    rec.retry_at_ms = 0;
    rec.lease_deadline_ms = 0;
    s.stage_replace(found, before);
  } else {
    s.stage_erase(found);
  }
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
  impl::slot found;
  if (auto err = s.find_current(d, scratch, found))
    return err;
  auto& rec = *found.rec;
  ++s.pending_.nacked;
  if (rec.task.attempt >= rec.task.policy.max_attempts) {
    ++s.pending_.dead_lettered;
    s.stage_bury(found, now_ms, "nacked on attempt " + attempt_text(rec));
    return {};
  }
  auto wait_ms =
    retry_in_ms ? *retry_in_ms : rec.task.policy.backoff_ms(rec.task.attempt);
  auto before = storage::write_batch::key_of(rec);
  rec.state = task_state::pending;
  rec.lease_deadline_ms = 0;
  rec.retry_at_ms = saturating_add(now_ms, wait_ms);
  s.stage_replace(found, before);
  return {};
}

core::result<int64_t> shard_logic::touch(int64_t now_ms, const delivery_ref& d,
                                         int64_t extend_ms) {
  auto& s = *impl_;
  if (auto err = check_delay("extend_ms", extend_ms, s.limits()))
    return err;
  std::optional<task_record> scratch;
  impl::slot found;
  if (auto err = s.find_current(d, scratch, found))
    return err;
  auto& rec = *found.rec;
  auto before = storage::write_batch::key_of(rec);
  rec.lease_deadline_ms = saturating_add(
    now_ms, extend_ms == 0 ? rec.task.policy.lease_ms : extend_ms);
  auto deadline_ms = rec.lease_deadline_ms;
  s.stage_replace(found, before);
  return deadline_ms;
}

core::error shard_logic::requeue(int64_t now_ms, const delivery_ref& d) {
  auto& s = *impl_;
  std::optional<task_record> scratch;
  impl::slot found;
  if (auto err = s.find_current(d, scratch, found))
    return err;
  auto& rec = *found.rec;
  if (rec.task.attempt >= rec.task.policy.max_attempts) {
    ++s.pending_.dead_lettered;
    s.stage_bury(found, now_ms,
                 "consumer lost on attempt " + attempt_text(rec));
    return {};
  }
  auto before = storage::write_batch::key_of(rec);
  rec.state = task_state::pending;
  rec.lease_deadline_ms = 0;
  rec.retry_at_ms = now_ms;
  s.stage_replace(found, before);
  return {};
}

core::error shard_logic::undelivered(int64_t, const delivery_ref& d) {
  auto& s = *impl_;
  std::optional<task_record> scratch;
  impl::slot found;
  if (auto err = s.find_current(d, scratch, found))
    return err;
  auto& rec = *found.rec;
  auto before = storage::write_batch::key_of(rec);
  rec.state = task_state::pending;
  rec.lease_deadline_ms = 0;
  if (rec.task.attempt > 0)
    --rec.task.attempt;
  s.set_topic_available(rec.task.topic, false);
  s.stage_replace(found, before);
  return {};
}

core::result<dead_page> shard_logic::dead_letters(core::task_id after,
                                                  size_t limit) {
  auto& s = *impl_;
  if (limit == 0)
    limit = std::max<size_t>(s.opts_.dead_letter_page, 1);
  limit = std::min<size_t>(limit, std::numeric_limits<size_t>::max() / 2);
  dead_page page;
  if (!s.has_dead_changes_) {
    auto got = s.store_.dead_letters(after, limit + 1);
    if (!got)
      return got.err();
    page.dead = std::move(*got);
  } else {
    // Merge the batch's burials and revivals into the store's page.
    auto got = s.store_.dead_letters(after, limit + 1 + s.revived_from_store_);
    if (!got)
      return got.err();
    for (auto& dead : *got)
      if (!s.overlay_.contains(dead.record.task.id))
        page.dead.push_back(std::move(dead));
    s.overlay_.for_each([&](core::task_id id, const auto& entry) {
      if (entry.what == impl::staged_entry::kind::dead && id > after)
        page.dead.push_back(
          storage::dead_letter{entry.rec, entry.dead_ms, entry.dead_reason});
    });
    std::sort(page.dead.begin(), page.dead.end(),
              [](const auto& x, const auto& y) {
                return x.record.task.id < y.record.task.id;
              });
  }
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
  impl::staged_entry* entry = nullptr;
  if (auto* found = s.overlay_.find(id)) {
    if (found->what != impl::staged_entry::kind::dead)
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
  rec.state = task_state::pending;
  rec.task.attempt = 0;
  rec.task.due_ms = due_ms.value_or(now_ms);
  rec.retry_at_ms = 0;
  rec.lease_deadline_ms = 0;
  s.stage_revive(std::move(rec), entry);
  ++s.pending_.kicked;
  return change_outcome::done;
}

// -- consumers ----------------------------------------------------------------

void shard_logic::set_topic_available(const std::string& topic,
                                      bool available) {
  impl_->set_topic_available(topic, available);
}

// -- timers -------------------------------------------------------------------

core::error shard_logic::fire(int64_t now_ms) {
  return impl_->fire(now_ms);
}

int64_t shard_logic::next_wakeup_ms() const {
  return impl_->next_wakeup_ms();
}

core::error shard_logic::write_failure() const {
  return impl_->store_.write_failure();
}

core::error shard_logic::maintain(int64_t now_ms) {
  auto& s = *impl_;
  // Safe while writes are staged: this deletes only keys that find_key no
  // longer returns, and a key the batch stages again lands after it.
  auto expired = s.store_.expire_keys(now_ms, expire_keys_per_maintain);
  if (!expired)
    return expired.err();
  return s.store_.sync_if_due(now_ms);
}

// -- group commit -------------------------------------------------------------

bool shard_logic::dirty() const noexcept {
  return !impl_->batch_.empty() || !impl_->fired_.empty();
}

bool shard_logic::sync_pending() const noexcept {
  return impl_->store_.sync_pending();
}

shard_logic::commit_result shard_logic::commit(int64_t now_ms,
                                               bool answers_waiting) {
  return impl_->commit(now_ms, answers_waiting);
}

void shard_logic::prefetch(std::span<const core::task_id> ids) const {
  impl_->prefetch_records(ids, [](core::task_id id) { return id; });
}

size_t shard_logic::cached_records() const noexcept {
  return impl_->cached_.size();
}

size_t shard_logic::record_cache_slots() const noexcept {
  return impl_->cached_.capacity();
}

size_t shard_logic::held_size() const noexcept {
  size_t n = 0;
  for (const auto& [id, hold] : impl_->holds_)
    if (hold->pending())
      ++n;
  return n;
}

// -- state --------------------------------------------------------------------

const shard_counters& shard_logic::counters() const noexcept {
  return impl_->counters_;
}

size_t shard_logic::window_size() const noexcept {
  return impl_->window_->size();
}

std::map<std::string, uint64_t> shard_logic::waiting() const {
  std::map<std::string, uint64_t> out;
  for (const auto& [name, ts] : impl_->topics_)
    if (auto n = ts.parked.size() + ts.dropped; n > 0)
      out.emplace(name, n);
  return out;
}

size_t shard_logic::backlog_size() const noexcept {
  return impl_->backlog_.size();
}

const shard_options& shard_logic::options() const noexcept {
  return impl_->opts_;
}

// -- conversions --------------------------------------------------------------

namespace {

core::result<core::recurrence> to_recurrence(const v1::RecurrenceSpec& when,
                                             int64_t now_ms,
                                             const core::task_limits& limits) {
  using spec = v1::RecurrenceSpec;
  core::recurrence_bounds bounds;
  if (when.has_start_ms())
    bounds.start_ms = when.start_ms();
  if (when.has_end_ms())
    bounds.end_ms = when.end_ms();
  if (when.has_max_count())
    bounds.max_count = when.max_count();
  bool bounded = bounds.start_ms || bounds.end_ms || bounds.max_count;
  auto one_shot = [&](const char* what) -> core::error {
    if (!bounded)
      return {};
    return core::error{errc::invalid_request,
                       std::string{what} +
                         " takes no start_ms, end_ms or max_count; those "
                         "bound periodic kinds"};
  };
  switch (when.kind_case()) {
    case spec::KIND_NOT_SET:
      // A kind from a newer client arrives as an unknown field: refuse it
      // rather than firing at once.
      if (!when.GetReflection()->GetUnknownFields(when).empty())
        return core::error{errc::invalid_request,
                           "the recurrence kind is unknown to this node"};
      if (auto err = one_shot("a task without a recurrence kind"))
        return err;
      return core::recurrence::at(now_ms);
    case spec::kAtMs:
      if (auto err = one_shot("at_ms"))
        return err;
      return core::recurrence::at(when.at_ms());
    case spec::kInMs:
      if (auto err = one_shot("in_ms"))
        return err;
      return core::recurrence::after(now_ms, when.in_ms(), limits);
    case spec::kEveryMs:
      return core::recurrence::fixed_rate(now_ms, when.every_ms(), bounds,
                                          limits);
    case spec::kEveryAfterDoneMs:
      return core::recurrence::fixed_delay(now_ms, when.every_after_done_ms(),
                                           bounds, limits);
    case spec::kIntervals: {
      const auto& list = when.intervals().intervals_ms();
      return core::recurrence::intervals(
        now_ms, std::vector<int64_t>(list.begin(), list.end()),
        when.intervals().cyclic(), bounds, limits);
    }
    case spec::kCron: {
      const auto& zone = when.cron().zone();
      return core::recurrence::cron(now_ms, when.cron().expression(),
                                    zone.empty() ? std::string_view{"UTC"}
                                                 : std::string_view{zone},
                                    bounds, limits);
    }
  }
  return core::error{errc::invalid_request,
                     "recurrence kind " +
                       std::to_string(static_cast<int>(when.kind_case())) +
                       " is unknown"};
}

/// to_task with the request's topic and payload given apart, so that a
/// consumed request's strings can move instead of being copied.
core::result<core::task> make_task(const v1::ScheduleRequest& req,
                                   std::string topic, std::string payload,
                                   int64_t now_ms, const shard_options& opts) {
  auto rec = to_recurrence(req.when(), now_ms, opts.limits);
  if (!rec)
    return rec.err();
  core::task t;
  t.topic = std::move(topic);
  t.payload = std::move(payload);
  t.recurrence = std::move(*rec);
  if (req.has_policy()) {
    // Not storage::from_proto: a bad policy from a client is invalid_policy,
    // not a corrupt record.
    const auto& p = req.policy();
    t.policy.lease_ms = p.lease_ms();
    t.policy.max_attempts = p.max_attempts();
    t.policy.backoff_initial_ms = p.backoff_initial_ms();
    t.policy.backoff_multiplier_permille = p.backoff_multiplier_permille();
    t.policy.backoff_max_ms = p.backoff_max_ms();
  } else {
    t.policy = opts.default_policy;
  }
  auto due = t.recurrence.first_fire(now_ms);
  if (!due)
    return core::error{errc::no_occurrence,
                       "the recurrence has no occurrence after " +
                         core::format_time(now_ms)};
  t.due_ms = *due;
  if (req.has_idempotency_key())
    t.idempotency_key = req.idempotency_key();
  if (auto err = t.validate(now_ms, opts.limits))
    return err;
  return t;
}

} // namespace

core::result<core::task> to_task(const v1::ScheduleRequest& req, int64_t now_ms,
                                 const shard_options& opts) {
  return make_task(req, req.topic(), req.payload(), now_ms, opts);
}

core::result<core::task> to_task(v1::ScheduleRequest&& req, int64_t now_ms,
                                 const shard_options& opts) {
  auto topic = std::move(*req.mutable_topic());
  auto payload = std::move(*req.mutable_payload());
  return make_task(req, std::move(topic), std::move(payload), now_ms, opts);
}

v1::TaskRecord to_wire(const storage::task_record& rec) {
  v1::TaskRecord out;
  // Only a topic that is not UTF-8 fails, and validation refused those.
  static_cast<void>(storage::to_proto(rec, out));
  return out;
}

} // namespace dally::logic
