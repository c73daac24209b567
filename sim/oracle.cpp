#include "sim/oracle.hpp"

#include <algorithm>

namespace dally::sim {

namespace {

std::string str(uint64_t x) {
  return std::to_string(x);
}

std::string str(int64_t x) {
  return std::to_string(x);
}

std::string describe(const delivery_ref& d) {
  return "task " + str(d.id) + " occurrence " + str(d.occurrence) +
         " attempt " + str(uint64_t{d.attempt});
}

} // namespace

// -- the engine's wall clock --------------------------------------------------

void oracle::clock_read(int64_t wall_ms) {
  readings_.push_back(wall_ms);
  high_water_ms_ = std::max(high_water_ms_, wall_ms);
}

std::optional<int64_t> oracle::min_since(size_t mark) const {
  if (mark >= readings_.size())
    return std::nullopt;
  return *std::min_element(readings_.begin() + static_cast<ptrdiff_t>(mark),
                           readings_.end());
}

std::optional<int64_t> oracle::max_since(size_t mark) const {
  if (mark >= readings_.size())
    return std::nullopt;
  return *std::max_element(readings_.begin() + static_cast<ptrdiff_t>(mark),
                           readings_.end());
}

// -- clients ------------------------------------------------------------------

void oracle::schedule_arrived(const task_request& req, int64_t true_ms) {
  auto [it, fresh] = keys_.try_emplace(req.key);
  if (!fresh)
    return;
  auto& k = it->second;
  k.req = req;
  k.ref = reference_schedule::make(req.when);
  k.arrived_mark = readings_.size();
  k.arrived_true_ms = true_ms;
  key_of_payload_[req.payload] = req.key;
}

/// The engine took the request with one of the readings it made since the
/// request arrived (true time within the skew, if it made none).
void oracle::bound_now(task_state& t, const key_state& k) const {
  t.now_lo_ms =
    min_since(k.arrived_mark).value_or(k.arrived_true_ms - max_skew_ms_);
  t.now_hi_ms =
    max_since(k.arrived_mark).value_or(std::max(t.now_lo_ms, high_water_ms_));
}

std::optional<violation> oracle::schedule_answered(const std::string& key,
                                                   uint64_t id,
                                                   int64_t true_ms) {
  auto kit = keys_.find(key);
  if (kit == keys_.end())
    return violation{"harness", "key " + key + " was answered (at " +
                                  str(true_ms) + ") but never arrived"};
  auto& k = kit->second;
  if (!k.ref)
    return violation{"harness", "the reference cannot model the request of "
                                "key " +
                                  key};
  if (k.id && *k.id != id)
    return violation{"unique_id", "key " + key + " was answered task " +
                                    str(*k.id) + " before, now task " +
                                    str(id)};
  auto& t = tasks_[id];
  if (t.key && *t.key != key)
    return violation{"unique_id", "task " + str(id) +
                                    " was handed out for key " + *t.key +
                                    " and again for key " + key};
  k.id = id;
  if (!t.key) {
    t.key = key;
    bound_now(t, k);
  }
  t.answered = true;
  return std::nullopt;
}

void oracle::reschedule_arrived(uint64_t id, int64_t due_ms) {
  auto& t = tasks_[id];
  t.reschedules.insert(due_ms);
  ++t.reschedules_arrived;
}

void oracle::revoke_arrived(uint64_t id) {
  ++tasks_[id].revokes_arrived;
}

void oracle::revoke_answered(uint64_t id, change_answer answer) {
  auto& t = tasks_[id];
  if (answer == change_answer::failed) {
    t.revoke_failed = true;
    return;
  }
  ++t.revokes_definite;
  // The first done or in_flight counts: a retried or duplicated revoke
  // then finds the task completed, which changes nothing.
  if ((answer == change_answer::done || answer == change_answer::in_flight) &&
      !t.revoked)
    t.revoked = answer;
}

// -- deliveries ---------------------------------------------------------------

std::optional<violation> oracle::match(const delivery_sent& d, task_state*& out,
                                       const key_state*& key) {
  auto where = describe(d.ref) + ": ";
  auto& t = tasks_[d.ref.id];
  if (!t.key) {
    // A task whose schedule was never answered (the engine died, or its
    // disk failed, before the answer left): known by its payload.
    auto pit = key_of_payload_.find(d.payload);
    if (pit == key_of_payload_.end())
      return violation{"payload", where + "its payload '" + d.payload +
                                    "' is none a client asked for"};
    auto& k = keys_.at(pit->second);
    if (k.id && *k.id != d.ref.id)
      return violation{"payload",
                       where + "carries the payload of task " + str(*k.id)};
    if (!k.ref)
      return violation{"harness", where + "the reference cannot model it"};
    t.key = pit->second;
    k.id = d.ref.id;
    bound_now(t, k);
  }
  const auto& k = keys_.at(*t.key);
  if (d.topic != k.req.topic || d.payload != k.req.payload)
    return violation{"payload", where + "carries topic '" + d.topic +
                                  "' and payload '" + d.payload +
                                  "'; its client asked for '" + k.req.topic +
                                  "' and '" + k.req.payload + "'"};
  out = &t;
  key = &k;
  return std::nullopt;
}

bool oracle::first_due_fits(task_state& t, const key_state& k,
                            int64_t due_ms) const {
  const auto& ref = *k.ref;
  switch (k.req.when.what) {
    case when_asked::kind::at:
      return due_ms == k.req.when.at_ms;
    case when_asked::kind::cron: {
      // The first match after the reading the engine took it at.
      auto lo = ref.first(t.now_lo_ms);
      auto hi = ref.first(t.now_hi_ms);
      return ref.is_point(due_ms, 0) && lo && hi && *lo <= due_ms &&
             due_ms <= *hi;
    }
    default: {
      // A fixed offset from the reading the engine took it at: the due
      // time pins that reading.
      auto offset = ref.first(0);
      if (!offset)
        return false;
      auto now = due_ms - *offset;
      if (now < t.now_lo_ms || now > t.now_hi_ms || ref.first(now) != due_ms)
        return false;
      t.now_ms = now;
      return true;
    }
  }
}

bool oracle::next_due_fits(task_state& t, const key_state& k, int64_t due_ms,
                           const occurrence_state& prev) const {
  const auto& ref = *k.ref;
  if (due_ms <= prev.due_ms)
    return false;
  if (!t.now_ms && k.req.when.what != when_asked::kind::cron) {
    // The first due time was a rescheduled one, so nothing pinned the
    // reading the engine took the request at: any candidate will do.
    for (auto now = t.now_lo_ms; now <= t.now_hi_ms; ++now)
      if (ref.is_point(due_ms, now))
        return true;
    return false;
  }
  auto now = t.now_ms.value_or(0);
  if (!ref.is_point(due_ms, now))
    return false;
  // Catch-up: no earlier than the first point after both the previous
  // due time and the ack, which the engine processed at a reading made
  // after a consumer acked. (How many points it skipped past that, the
  // oracle cannot tell: it does not know which later reading was the ack's.)
  auto acked_ms = min_since(prev.ack_mark).value_or(prev.due_ms);
  auto lo = ref.next_after(std::max(prev.due_ms, acked_ms), now);
  return lo && *lo <= due_ms;
}

std::optional<violation> oracle::check_due(const delivery_sent& d,
                                           task_state& t, const key_state& k) {
  auto where = describe(d.ref) + ": ";
  auto due = d.due_ms;
  bool rescheduled = t.reschedules.count(due) > 0;
  bool fits = false;
  if (auto it = t.occurrences.find(d.ref.occurrence);
      it != t.occurrences.end()) {
    fits = due == it->second.due_ms || rescheduled;
  } else if (d.ref.occurrence == 0) {
    fits = rescheduled || first_due_fits(t, k, due);
  } else {
    auto prev = t.occurrences.find(d.ref.occurrence - 1);
    if (prev == t.occurrences.end() || !prev->second.acked)
      return violation{"recurrence_due",
                       where + "no consumer acked occurrence " +
                         str(d.ref.occurrence - 1) + " before it"};
    fits = rescheduled || next_due_fits(t, k, due, prev->second);
  }
  if (fits)
    return std::nullopt;
  const auto& w = k.req.when;
  if (!k.ref->recurring()) {
    auto asked = w.what == when_asked::kind::at
                   ? "at " + str(w.at_ms)
                   : "in " + str(w.in_ms) + " ms of a reading in [" +
                       str(t.now_lo_ms) + ", " + str(t.now_hi_ms) + "]";
    return violation{"due_time", where + "due " + str(due) +
                                   ", but its client asked for " + asked +
                                   " (or a reschedule)"};
  }
  return violation{"recurrence_due",
                   where + "due " + str(due) +
                     " is not the occurrence its schedule gives (taken at "
                     "a reading in [" +
                     str(t.now_lo_ms) + ", " + str(t.now_hi_ms) + "])"};
}

bool oracle::moved_unseen(const task_state& t,
                          const occurrence_state& occ) const {
  if (occ.restarts_at_last != restarts_ ||
      occ.reschedules_at_last != t.reschedules_arrived || !occ.consumer_alive ||
      t.revokes_arrived > 0 || t.damaged)
    return true;
  auto it = deaths_.find(occ.consumer);
  return it != deaths_.end() && it->second != occ.consumer_deaths_at_last;
}

std::optional<int64_t> oracle::earliest_retry_ms(const occurrence_state& occ,
                                                 const key_state& k,
                                                 uint64_t reschedules) const {
  // A restart redelivers what was in flight without a write at once, a
  // reschedule moves the task, a dead consumer's deliveries are requeued
  // at once, a step back ends a lease before the clock reads its end.
  if (occ.restarts_at_last != restarts_ ||
      occ.backsteps_at_last != backsteps_ ||
      occ.reschedules_at_last != reschedules || !occ.consumer_alive)
    return std::nullopt;
  if (auto it = deaths_.find(occ.consumer);
      it != deaths_.end() && it->second != occ.consumer_deaths_at_last)
    return std::nullopt;
  const auto& r = k.req;
  // Expired: at a reading past the lease deadline, plus the backoff.
  auto out =
    occ.lease_lo_ms + reference_backoff_ms(r.backoff_initial_ms,
                                           r.backoff_multiplier_permille,
                                           r.backoff_max_ms, occ.last_attempt);
  // Nacked: at a reading after the nack was sent, plus its delay.
  if (occ.nack_mark)
    if (auto at = min_since(*occ.nack_mark))
      out = std::min(out, *at + occ.nack_retry_ms);
  return out;
}

std::optional<violation>
oracle::check_attempt(const delivery_sent& d, const task_state& t,
                      const key_state& k, std::optional<int64_t>& earliest) {
  auto where = describe(d.ref) + ": ";
  if (d.ref.attempt == 0 || d.ref.attempt > k.req.max_attempts)
    return violation{"attempts", where + "outside 1 to its max_attempts " +
                                   str(uint64_t{k.req.max_attempts})};
  auto it = t.occurrences.find(d.ref.occurrence);
  if (it == t.occurrences.end())
    return std::nullopt;
  const auto& occ = it->second;
  auto last = str(uint64_t{occ.last_attempt});
  if (d.ref.attempt <= occ.last_attempt)
    return violation{"attempts", where + "attempt " + last + " left before"};
  if (d.ref.attempt != occ.last_attempt + 1) {
    if (occ.disturbances_at_last == disturbances_)
      return violation{"attempts", where + "follows attempt " + last +
                                     " with no crash or fault between"};
    return std::nullopt;
  }
  earliest = earliest_retry_ms(occ, k, t.reschedules_arrived);
  if (earliest && high_water_ms_ < *earliest)
    return violation{"lease", where +
                                "left while the engine's clock had read "
                                "at most " +
                                str(high_water_ms_) + ", before " +
                                str(*earliest) + ", the end of attempt " +
                                last + "'s lease or retry delay"};
  return std::nullopt;
}

void oracle::record(const delivery_sent& d, task_state& t, const key_state& k,
                    std::optional<int64_t> earliest) {
  auto& occ = t.occurrences[d.ref.occurrence];
  occ.due_ms = d.due_ms;
  // Released no earlier than its due time and its retry time; the lease
  // runs from then (or from a later fire).
  occ.index_lo_ms = std::max(d.due_ms, earliest.value_or(d.due_ms));
  occ.lease_lo_ms = occ.index_lo_ms + k.req.lease_ms;
  occ.last_attempt = d.ref.attempt;
  occ.disturbances_at_last = disturbances_;
  occ.restarts_at_last = restarts_;
  occ.backsteps_at_last = backsteps_;
  occ.reschedules_at_last = t.reschedules_arrived;
  occ.consumer = d.consumer;
  auto dit = deaths_.find(d.consumer);
  occ.consumer_deaths_at_last = dit == deaths_.end() ? 0 : dit->second;
  occ.consumer_alive = d.consumer_alive;
  occ.nack_mark.reset();
  // The engine sent the occurrence again: no ack of an attempt before
  // took effect.
  occ.acked = false;
}

std::optional<violation> oracle::sent(const delivery_sent& d) {
  ++deliveries_;
  task_state* t = nullptr;
  const key_state* k = nullptr;
  if (auto v = match(d, t, k))
    return v;
  auto where = describe(d.ref) + " due " + str(d.due_ms) + ": ";
  if (t->damaged)
    return violation{"corrupt_record", where + "left after its stored record "
                                               "was damaged (it must be "
                                               "quarantined, not delivered)"};
  if (t->revoked == change_answer::done)
    return violation{"revoke", where + "left after its revoke's answer done "
                                       "left the engine"};
  if (t->revoked == change_answer::in_flight && ++t->sent_after_in_flight > 1)
    return violation{"revoke", where + "left again after its revoke's answer "
                                       "in_flight left the engine"};
  if (!t->occurrences.count(d.ref.occurrence) &&
      t->occurrences.size() + 1 > k->ref->max_occurrences())
    return violation{"recurrence_count",
                     where + str(uint64_t{t->occurrences.size() + 1}) +
                       " occurrences, of at most " +
                       str(k->ref->max_occurrences())};
  if (auto v = check_due(d, *t, *k))
    return v;
  if (high_water_ms_ < d.due_ms)
    return violation{"never_early", where +
                                      "left while the engine's wall "
                                      "clock had read at most " +
                                      str(high_water_ms_)};
  if (d.true_ms < d.due_ms - max_skew_ms_)
    return violation{"never_early", where + "left at true time " +
                                      str(d.true_ms) +
                                      ", earlier than the clock's skew of " +
                                      str(max_skew_ms_) + " ms allows"};
  std::optional<int64_t> earliest;
  if (auto v = check_attempt(d, *t, *k, earliest))
    return v;
  record(d, *t, *k, earliest);
  return std::nullopt;
}

// -- consumers' answers -------------------------------------------------------

oracle::occurrence_state* oracle::current(const delivery_ref& d) {
  auto it = tasks_.find(d.id);
  if (it == tasks_.end() || it->second.occurrences.empty())
    return nullptr;
  auto& [occurrence, occ] = *it->second.occurrences.rbegin();
  // An answer to an attempt or occurrence the engine has moved past
  // changes nothing there.
  if (occurrence != d.occurrence || occ.last_attempt != d.attempt)
    return nullptr;
  return &occ;
}

void oracle::answered(const delivery_ref& d, consumer_verdict v,
                      std::optional<int64_t> retry_in_ms) {
  auto* occ = current(d);
  if (occ == nullptr)
    return;
  switch (v) {
    case consumer_verdict::ack:
      if (!occ->acked) {
        occ->acked = true;
        occ->ack_mark = readings_.size();
      }
      break;
    case consumer_verdict::nack: {
      occ->nack_mark = readings_.size();
      const auto& r = keys_.at(*tasks_.at(d.id).key).req;
      occ->nack_retry_ms =
        retry_in_ms ? *retry_in_ms
                    : reference_backoff_ms(r.backoff_initial_ms,
                                           r.backoff_multiplier_permille,
                                           r.backoff_max_ms, d.attempt);
      break;
    }
    case consumer_verdict::later:
      break;
  }
}

std::optional<violation> oracle::refused(const delivery_ref& d,
                                         const char* what) {
  auto* occ = current(d);
  if (occ == nullptr)
    return std::nullopt;
  const auto& t = tasks_.at(d.id);
  if (moved_unseen(t, *occ))
    return std::nullopt;
  occ->acked = false;
  if (high_water_ms_ >= occ->lease_lo_ms ||
      occ->backsteps_at_last != backsteps_)
    return std::nullopt;
  return violation{"lease", describe(d) + ": the engine refused its " + what +
                              " while its clock had read at most " +
                              str(high_water_ms_) + ", before " +
                              str(occ->lease_lo_ms) + ", the end of its lease"};
}

std::optional<violation> oracle::touch_answered(const delivery_ref& d,
                                                int64_t extend_ms,
                                                bool accepted,
                                                size_t arrived_mark) {
  if (!accepted)
    return refused(d, "touch");
  auto* occ = current(d);
  if (occ == nullptr)
    return std::nullopt;
  // The engine processed the touch at a reading made since it arrived;
  // the lease then ends that long after (it may also shorten it).
  auto at = min_since(arrived_mark);
  if (!at)
    return std::nullopt;
  const auto& r = keys_.at(*tasks_.at(d.id).key).req;
  occ->lease_lo_ms = *at + (extend_ms == 0 ? r.lease_ms : extend_ms);
  return std::nullopt;
}

void oracle::touch_may_apply(const delivery_ref& d, int64_t extend_ms,
                             size_t sent_mark) {
  auto* occ = current(d);
  if (occ == nullptr)
    return;
  // Done at a reading since it left, or at one still to come.
  auto at = min_since(sent_mark).value_or(high_water_ms_);
  const auto& r = keys_.at(*tasks_.at(d.id).key).req;
  occ->lease_lo_ms =
    std::min(occ->lease_lo_ms, at + (extend_ms == 0 ? r.lease_ms : extend_ms));
}

std::optional<violation> oracle::ack_answered(const delivery_ref& d,
                                              bool accepted) {
  if (accepted)
    return std::nullopt;
  return refused(d, "ack");
}

// -- the end ------------------------------------------------------------------

std::vector<uint64_t> oracle::known_ids() const {
  std::vector<uint64_t> out;
  for (const auto& [id, t] : tasks_)
    if (t.answered)
      out.push_back(id);
  return out;
}

std::vector<oracle::awaited> oracle::awaited_first() const {
  std::vector<awaited> out;
  for (const auto& [id, t] : tasks_) {
    if (!t.answered || !t.key || !t.occurrences.empty() || t.damaged ||
        !t.reschedules.empty() || t.reschedules_arrived > 0 ||
        t.revokes_arrived > 0 || t.revoked)
      continue;
    auto k = keys_.find(*t.key);
    if (k == keys_.end() || !k->second.ref)
      continue;
    const auto& when = k->second.req.when;
    auto due = when.what == when_asked::kind::at
                 ? std::optional<int64_t>{when.at_ms}
                 : k->second.ref->first(t.now_hi_ms);
    if (due)
      out.push_back({id, *due});
  }
  return out;
}

std::optional<violation> oracle::check_gone(uint64_t id, const task_state& t,
                                            const key_state& k) const {
  auto where = "task " + str(id) + ": ";
  if (t.occurrences.empty())
    return violation{"lost", where + "acknowledged, never revoked, gone from "
                                     "the engine and never delivered"};
  const auto& [occurrence, last] = *t.occurrences.rbegin();
  auto which = "occurrence " + str(occurrence) + " attempt " +
               str(uint64_t{last.last_attempt});
  if (!last.acked) {
    if (last.last_attempt < k.req.max_attempts)
      return violation{"retry", where + which +
                                  " failed (nacked or its lease ran out), "
                                  "never came back, and the task is gone"};
    return violation{"retry", where + which +
                                " was its last and failed, yet the task is "
                                "gone, not a dead letter"};
  }
  if (k.ref->recurring() && k.ref->exact_count() &&
      t.occurrences.size() != k.ref->max_occurrences())
    return violation{
      "recurrence_count",
      where + "gone after " + str(uint64_t{t.occurrences.size()}) +
        " occurrences acked, of a count of " + str(k.ref->max_occurrences())};
  return std::nullopt;
}

std::optional<violation> oracle::check_final(uint64_t id, final_state state,
                                             uint32_t dead_attempt) const {
  auto it = tasks_.find(id);
  if (it == tasks_.end() || !it->second.answered)
    return std::nullopt;
  const auto& t = it->second;
  const auto& k = keys_.at(*t.key);
  auto where = "task " + str(id) + ": ";
  bool present = state == final_state::live || state == final_state::dead;
  auto shown = state == final_state::live ? "live" : "a dead letter";
  if (t.damaged) {
    if (present)
      return violation{"corrupt_record", where +
                                           "its stored record was damaged, "
                                           "yet the engine reports it " +
                                           shown};
    return std::nullopt;
  }
  if (state == final_state::quarantined)
    return violation{"corrupt_record", where + "quarantined, but no fault "
                                               "damaged its record"};
  if (t.revoked) {
    if (present)
      return violation{
        "revoke", where + "its revoke was answered " +
                    (*t.revoked == change_answer::done ? "done" : "in_flight") +
                    ", yet it is " + shown};
    return std::nullopt;
  }
  // A revoke the engine took without an answer (or with an error) may
  // have removed it.
  if (t.revoke_failed || t.revokes_arrived > t.revokes_definite)
    return std::nullopt;
  if (state == final_state::dead) {
    if (dead_attempt < k.req.max_attempts)
      return violation{"dead_letter", where + "dead-lettered after " +
                                        str(uint64_t{dead_attempt}) + " of " +
                                        str(uint64_t{k.req.max_attempts}) +
                                        " attempts"};
    return std::nullopt;
  }
  if (state == final_state::live)
    return violation{"liveness", where + "still live after the liveness phase"};
  return check_gone(id, t, k);
}

} // namespace dally::sim
