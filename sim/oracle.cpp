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

} // namespace

void oracle::acknowledged(uint64_t id, const task_expectation& what) {
  auto& t = tasks_[id];
  t.acked = true;
  t.what = what;
  // A retry of a key whose task is no longer live answers due time 0.
  if (!what.recurring && what.due_ms != 0)
    t.dues.insert(what.due_ms);
}

void oracle::reschedule_sent(uint64_t id, int64_t due_ms) {
  tasks_[id].dues.insert(due_ms);
}

void oracle::revoke_sent(uint64_t id) {
  tasks_[id].revoke_sent = true;
}

void oracle::revoke_answered(uint64_t id, revoke_answer answer) {
  auto& t = tasks_[id];
  // The first definite answer counts: a retried or duplicated revoke then
  // finds the task completed, which changes nothing.
  bool definite = t.revoke && (*t.revoke == revoke_answer::done ||
                               *t.revoke == revoke_answer::in_flight);
  if (!definite) {
    t.revoke = answer;
    t.after_revoke = 0;
  }
}

std::optional<violation> oracle::delivered(const delivery_seen& d) {
  ++deliveries_;
  auto where = "task " + str(d.id) + " occurrence " + str(d.occurrence) +
               " attempt " + str(uint64_t{d.attempt}) + " due " +
               str(d.due_ms) + ": ";
  if (d.wall_high_water_ms < d.due_ms)
    return violation{"never_early",
                     where +
                       "delivered while the engine's wall clock had "
                       "read at most " +
                       str(d.wall_high_water_ms)};
  if (d.true_ms < d.due_ms - max_skew_ms_)
    return violation{"never_early", where + "delivered at true time " +
                                      str(d.true_ms) +
                                      ", earlier than the clock's skew of " +
                                      str(max_skew_ms_) + " ms allows"};
  auto& t = tasks_[d.id];
  if (t.damaged)
    return violation{"corrupt_record", where +
                                         "delivered after its stored record "
                                         "was damaged (it must be "
                                         "quarantined, not delivered)"};
  if (t.acked && !t.what.recurring && !t.dues.empty() &&
      !t.dues.count(d.due_ms))
    return violation{"due_time",
                     where + "the due time is none the task was scheduled "
                             "or rescheduled to"};
  if (d.attempt == 0)
    return violation{"attempts", where + "attempt 0"};
  // Stale: received after its lease ran out, so the engine may already
  // have sent the next attempt or answered a revoke. It still counts as a
  // delivery of its occurrence, since its ack may yet be accepted.
  auto& occ = t.seen[d.occurrence];
  if (d.stale()) {
    if (d.attempt > occ.max_attempt) {
      occ.max_attempt = d.attempt;
      occ.disturbances_at_last = disturbances_;
    }
  } else {
    if (occ.max_attempt > 0) {
      if (d.attempt <= occ.max_attempt)
        return violation{"attempts", where + "attempt " +
                                       str(uint64_t{occ.max_attempt}) +
                                       " was delivered before"};
      if (occ.disturbances_at_last == disturbances_ &&
          d.attempt != occ.max_attempt + 1)
        return violation{"attempts", where + "follows attempt " +
                                       str(uint64_t{occ.max_attempt}) +
                                       " with no crash or fault between"};
    }
    occ.max_attempt = d.attempt;
    occ.disturbances_at_last = disturbances_;
    if (t.revoke == revoke_answer::done)
      return violation{"revoke", where + "delivered after its revoke was "
                                         "answered done"};
    if (t.revoke == revoke_answer::in_flight && ++t.after_revoke > 1)
      return violation{"revoke", where + "delivered again after its revoke "
                                         "was answered in_flight"};
  }
  if (t.acked && t.what.recurring && t.seen.size() > t.what.occurrences)
    return violation{"recurrence_count",
                     where + str(uint64_t{t.seen.size()}) +
                       " occurrences delivered, of a count of " +
                       str(t.what.occurrences)};
  return std::nullopt;
}

std::vector<uint64_t> oracle::known_ids() const {
  std::vector<uint64_t> out;
  for (const auto& [id, t] : tasks_)
    if (t.acked)
      out.push_back(id);
  return out;
}

std::vector<uint64_t> oracle::intact_ids() const {
  std::vector<uint64_t> out;
  for (const auto& [id, t] : tasks_)
    if (t.acked && !t.damaged)
      out.push_back(id);
  return out;
}

std::optional<violation> oracle::check_final(uint64_t id, final_state state,
                                             uint32_t dead_attempt) const {
  auto it = tasks_.find(id);
  if (it == tasks_.end() || !it->second.acked)
    return std::nullopt;
  const auto& t = it->second;
  auto where = "task " + str(id) + ": ";
  if (t.damaged) {
    if (state == final_state::live || state == final_state::dead)
      return violation{
        "corrupt_record",
        where +
          "its stored record was damaged, yet the "
          "engine reports it " +
          (state == final_state::live ? "live" : "as a dead letter")};
    return std::nullopt;
  }
  if (state == final_state::quarantined)
    return violation{"corrupt_record", where + "quarantined, but no fault "
                                               "damaged its record"};
  if (state == final_state::dead) {
    if (dead_attempt < t.what.max_attempts)
      return violation{"dead_letter", where + "dead-lettered after " +
                                        str(uint64_t{dead_attempt}) + " of " +
                                        str(uint64_t{t.what.max_attempts}) +
                                        " attempts"};
    return std::nullopt;
  }
  if (t.revoke_sent || t.revoke)
    return std::nullopt;
  if (state == final_state::live)
    return violation{"liveness", where + "still live after the liveness phase"};
  if (t.seen.empty())
    return violation{"lost", where + "acknowledged, never revoked, gone from "
                                     "the engine and never delivered"};
  if (t.what.recurring && t.what.exact_count &&
      t.seen.size() != t.what.occurrences)
    return violation{"recurrence_count",
                     where + str(uint64_t{t.seen.size()}) +
                       " occurrences delivered, of a count of " +
                       str(t.what.occurrences)};
  return std::nullopt;
}

} // namespace dally::sim
