#include "logic/notifier_logic.hpp"

#include <absl/container/flat_hash_map.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <unordered_map>
#include <unordered_set>

namespace dally::logic {

namespace {

/// Hashes a delivery_ref for the sets of outstanding deliveries (ids are
/// sequential, so the three fields are mixed, not just xor-ed).
struct delivery_ref_hash {
  size_t operator()(const delivery_ref& d) const noexcept {
    auto mix = [](uint64_t x) {
      // SplitMix64's finalizer.
      x ^= x >> 30;
      x *= 0xbf58476d1ce4e5b9ULL;
      x ^= x >> 27;
      x *= 0x94d049bb133111ebULL;
      x ^= x >> 31;
      return x;
    };
    uint64_t h = mix(d.id);
    h = mix(h ^ (d.occurrence + 0x9e3779b97f4a7c15ULL));
    h = mix(h ^ (uint64_t{d.attempt} + 0x632be59bd9b4e019ULL));
    return static_cast<size_t>(h);
  }
};

delivery_ref ref_of(const v1::Delivery& d) {
  return delivery_ref{d.id().task_id(), d.id().occurrence(), d.id().attempt()};
}

constexpr int64_t never_ms = std::numeric_limits<int64_t>::max();

/// When a delivery still waiting in a queue goes back to its shard: once
/// half its lease (fire time to deadline) has passed, so that its shard
/// hears well before its own lease timer would redeliver it with the next
/// attempt. A lease deadline of 0 (unset) never runs out.
int64_t return_at(const v1::Delivery& d) {
  if (d.lease_deadline_ms() <= 0)
    return never_ms;
  auto lease = std::max<int64_t>(0, d.lease_deadline_ms() - d.fire_ms());
  return d.lease_deadline_ms() - lease + lease / 2;
}

bool overdue(const v1::Delivery& d, int64_t now_ms) {
  return return_at(d) <= now_ms;
}

/// What the shards were last told about a topic. `unknown` until the first
/// announcement: shards start with every topic unavailable, but a
/// notifier_logic may be new (a restarted notifier) while shards still think a
/// topic available, so the first announcement always goes out.
enum class announced : uint8_t { unknown, available, unavailable };

} // namespace

struct notifier_logic::impl {
  struct consumer_state;

  /// A current consumer of a topic.
  struct member {
    consumer_id id = 0;
    uint32_t max_in_flight = 1;
    /// Deliveries of the topic it holds unanswered.
    uint32_t held = 0;
    /// Stable: unordered_map nodes never move, and a consumer's state lives
    /// while it is a member of any topic.
    consumer_state* state = nullptr;
  };

  struct topic_state {
    std::string name;
    /// Current consumers, in the order set_consumers listed them.
    std::vector<member> members;
    /// Consumer id -> position in `members`.
    std::unordered_map<consumer_id, uint32_t> index;
    /// Deliveries held by consumers no longer in `members`; they may still
    /// answer, and get their count back if listed again.
    std::unordered_map<consumer_id, uint32_t> departed;
    /// Round-robin cursor into `members` for ties.
    size_t next = 0;
    /// Most entries `queue` may hold: the members' max_in_flight summed.
    uint64_t queue_bound = 1;
    std::deque<delivery_box> queue;
    uint64_t in_flight = 0;
    uint64_t delivered = 0;
    uint64_t expired = 0;
    announced state = announced::unknown;
    /// Whether the topic is in `ready_`.
    bool ready = false;
  };

  struct held_entry {
    topic_state* topic = nullptr;
    /// Send order, so a dead consumer's deliveries are requeued in order.
    uint64_t seq = 0;
  };

  struct consumer_state {
    /// Topics listing it, in the order it joined them.
    std::vector<topic_state*> topics;
    /// Flat: a delivery's entry lives from its send to its answer, and a
    /// node per delivery cost an allocation each.
    absl::flat_hash_map<delivery_ref, held_entry, delivery_ref_hash> held;
  };

  using held_iterator = decltype(consumer_state::held)::iterator;

  explicit impl(notifier_options opts) : opts_(opts) {
    // A cap of 0 would never send anything.
    opts_.max_in_flight_total =
      std::max<uint32_t>(opts_.max_in_flight_total, 1);
    opts_.max_queued_per_topic =
      std::max<uint32_t>(opts_.max_queued_per_topic, 1);
  }

  // -- state lookup -----------------------------------------------------------

  topic_state& topic(const std::string& name) {
    // Batches usually carry runs of one topic.
    if (last_ != nullptr && last_->name == name)
      return *last_;
    auto [i, added] = topics_.try_emplace(name);
    if (added)
      i->second.name = name;
    last_ = &i->second;
    return i->second;
  }

  void forget_if_idle(consumer_id id) {
    auto i = consumers_.find(id);
    if (i != consumers_.end() && i->second.topics.empty() &&
        i->second.held.empty())
      consumers_.erase(i);
  }

  // -- availability -----------------------------------------------------------

  void announce(topic_state& t, bool available, notifier_effects& out) {
    auto next = available ? announced::available : announced::unavailable;
    if (t.state == next)
      return;
    t.state = next;
    out.availability.emplace_back(t.name, available);
  }

  /// Unavailable without consumers; available again once the queue is down
  /// to half its soft bound (a full queue made it unavailable), so shards
  /// resume before the consumers run dry.
  void refresh(topic_state& t, notifier_effects& out) {
    if (t.members.empty())
      announce(t, false, out);
    else if (t.queue.size() <= t.queue_bound / 2)
      announce(t, true, out);
  }

  // -- membership -------------------------------------------------------------

  void reindex(topic_state& t) {
    t.index.clear();
    t.index.reserve(t.members.size());
    uint64_t bound = 0;
    for (uint32_t pos = 0; pos < t.members.size(); ++pos) {
      t.index.emplace(t.members[pos].id, pos);
      bound += t.members[pos].max_in_flight;
    }
    t.queue_bound = std::max<uint64_t>(bound, 1);
    if (t.next >= t.members.size())
      t.next = 0;
  }

  /// The topic has no consumer left: its queue goes back to the shards.
  void orphan(topic_state& t, notifier_effects& out) {
    for (auto& d : t.queue)
      out.undelivered.push_back(ref_of(*d));
    t.queue.clear();
    announce(t, false, out);
  }

  /// Removes `id` from the members of every topic. With `keep_held`, what
  /// it holds stays counted as departed (it may still answer).
  void leave_all(consumer_id id, consumer_state& c, bool keep_held,
                 notifier_effects& out) {
    for (auto* t : c.topics) {
      auto i = t->index.find(id);
      if (i == t->index.end())
        continue;
      auto pos = i->second;
      if (keep_held && t->members[pos].held > 0)
        t->departed[id] = t->members[pos].held;
      t->members.erase(t->members.begin() + pos);
      if (t->next > pos)
        --t->next;
      reindex(*t);
      if (t->members.empty())
        orphan(*t, out);
    }
    c.topics.clear();
  }

  void set_consumers(const std::string& name, std::vector<consumer_slot> list,
                     int64_t now_ms, notifier_effects& out) {
    auto& t = topic(name);
    std::vector<member> next;
    next.reserve(list.size());
    std::unordered_set<consumer_id> listed;
    listed.reserve(list.size());
    for (const auto& slot : list) {
      // The first entry of an id counts; a cap of 0 would never take work.
      if (!listed.insert(slot.id).second)
        continue;
      member m{slot.id, std::max<uint32_t>(slot.max_in_flight, 1), 0, nullptr};
      auto& c = consumers_[slot.id];
      m.state = &c;
      if (auto i = t.index.find(slot.id); i != t.index.end()) {
        m.held = t.members[i->second].held;
      } else {
        c.topics.push_back(&t);
        if (auto j = t.departed.find(slot.id); j != t.departed.end()) {
          m.held = j->second;
          t.departed.erase(j);
        }
      }
      next.push_back(m);
    }
    for (const auto& m : t.members) {
      if (listed.count(m.id) != 0)
        continue;
      if (m.held > 0)
        t.departed[m.id] = m.held;
      auto& ts = m.state->topics;
      ts.erase(std::find(ts.begin(), ts.end(), &t));
      forget_if_idle(m.id);
    }
    t.members = std::move(next);
    t.next = 0;
    reindex(t);
    if (t.members.empty()) {
      orphan(t, out);
      return;
    }
    make_ready(t);
    pump(now_ms, out);
    refresh(t, out);
  }

  // -- sending ----------------------------------------------------------------

  /// Queues `t` for a turn in the round robin over topics.
  void make_ready(topic_state& t) {
    if (!t.ready && !t.queue.empty()) {
      t.ready = true;
      ready_.push_back(&t);
    }
  }

  /// The member to take the next delivery of `t`: fewest held among those
  /// below their cap, ties broken round robin; npos if all are full.
  static size_t pick(const topic_state& t) {
    auto best = std::numeric_limits<size_t>::max();
    auto best_held = std::numeric_limits<uint32_t>::max();
    auto n = t.members.size();
    for (size_t k = 0; k < n; ++k) {
      auto pos = (t.next + k) % n;
      const auto& m = t.members[pos];
      if (m.held < m.max_in_flight && m.held < best_held) {
        best = pos;
        best_held = m.held;
        if (best_held == 0)
          break;
      }
    }
    return best;
  }

  /// `d` goes back to its shard unsent. Its shard marks the topic
  /// unavailable when it takes it back, so the topic counts as announced
  /// unavailable here too and is announced again once it can take more
  /// (`act` sends undelivered reports before availability).
  void give_back(topic_state& t, const v1::Delivery& d, notifier_effects& out) {
    out.undelivered.push_back(ref_of(d));
    ++t.expired;
    if (!t.members.empty())
      t.state = announced::unavailable;
  }

  /// Gives back the deliveries at the front of the queue that waited half
  /// their lease; true if there were any.
  bool return_overdue_front(topic_state& t, int64_t now_ms,
                            notifier_effects& out) {
    bool any = false;
    while (!t.queue.empty() && overdue(*t.queue.front(), now_ms)) {
      give_back(t, *t.queue.front(), out);
      t.queue.pop_front();
      any = true;
    }
    return any;
  }

  /// Sends the first live queued delivery of `t`, if a member has room.
  bool send_one(topic_state& t, int64_t now_ms, notifier_effects& out) {
    auto pos = pick(t);
    if (pos >= t.members.size())
      return false;
    return_overdue_front(t, now_ms, out);
    if (t.queue.empty()) {
      refresh(t, out);
      return false;
    }
    auto& m = t.members[pos];
    t.next = (pos + 1) % t.members.size();
    auto ref = ref_of(*t.queue.front());
    // The same delivery twice at one consumer is sent but counted once.
    if (m.state->held.try_emplace(ref, held_entry{&t, seq_++}).second) {
      ++m.held;
      ++t.in_flight;
      ++total_;
    }
    ++t.delivered;
    out.send.emplace_back(m.id, std::move(t.queue.front()));
    t.queue.pop_front();
    if (t.state != announced::available)
      refresh(t, out);
    return true;
  }

  /// Serves ready topics one delivery per turn until the total cap is
  /// reached or no ready topic can send. A topic whose consumers are full
  /// leaves the round until one of them frees a slot; topics waiting for
  /// the total cap stay in it, in order.
  void pump(int64_t now_ms, notifier_effects& out) {
    while (!ready_.empty() && total_ < opts_.max_in_flight_total) {
      auto* t = ready_.front();
      ready_.pop_front();
      if (send_one(*t, now_ms, out) && !t->queue.empty())
        ready_.push_back(t);
      else
        t->ready = false;
    }
  }

  /// Forgets one outstanding delivery; returns its topic.
  topic_state& release(consumer_id id, consumer_state& c, held_iterator i) {
    auto& t = *i->second.topic;
    c.held.erase(i);
    if (auto j = t.index.find(id); j != t.index.end()) {
      --t.members[j->second].held;
    } else if (auto k = t.departed.find(id); k != t.departed.end()) {
      if (--k->second == 0)
        t.departed.erase(k);
    }
    --t.in_flight;
    --total_;
    return t;
  }

  // -- events -----------------------------------------------------------------

  void deliver(std::vector<delivery_box>& batch, int64_t now_ms,
               notifier_effects& out) {
    for (auto& box : batch) {
      const auto& d = *box;
      auto& t = topic(d.topic());
      if (t.members.empty()) {
        out.undelivered.push_back(ref_of(d));
        announce(t, false, out);
        continue;
      }
      if (overdue(d, now_ms)) {
        give_back(t, d, out);
        refresh(t, out);
        continue;
      }
      if (t.queue.size() >= t.queue_bound &&
          return_overdue_front(t, now_ms, out))
        refresh(t, out);
      if (t.queue.size() >= opts_.max_queued_per_topic) {
        out.undelivered.push_back(ref_of(d));
        announce(t, false, out);
        continue;
      }
      // A full queue still takes what shards fired before they heard: a
      // delivery sent back costs its shard two writes and a reload.
      if (t.queue.size() >= t.queue_bound)
        announce(t, false, out);
      t.queue.push_back(std::move(box));
      make_ready(t);
      pump(now_ms, out);
    }
  }

  void consumer_down(consumer_id id, int64_t now_ms, notifier_effects& out) {
    auto ci = consumers_.find(id);
    if (ci == consumers_.end())
      return;
    auto& c = ci->second;
    auto subscribed = c.topics;
    leave_all(id, c, false, out);
    // In send order: the table's own order varies from run to run, and
    // the simulator replays a seed only if this does not.
    std::vector<std::pair<const delivery_ref*, const held_entry*>> held;
    held.reserve(c.held.size());
    for (const auto& [ref, entry] : c.held)
      held.emplace_back(&ref, &entry);
    std::sort(held.begin(), held.end(), [](const auto& x, const auto& y) {
      return x.second->seq < y.second->seq;
    });
    // Topics to pump: those it joined, then those it had left.
    std::vector<topic_state*> touched = std::move(subscribed);
    std::unordered_set<topic_state*> seen(touched.begin(), touched.end());
    for (const auto& [ref, entry] : held) {
      out.requeue.push_back(*ref);
      auto& t = *entry->topic;
      t.departed.erase(id);
      --t.in_flight;
      --total_;
      if (seen.insert(&t).second)
        touched.push_back(&t);
    }
    consumers_.erase(ci);
    for (auto* t : touched)
      make_ready(*t);
    pump(now_ms, out);
  }

  bool answered(consumer_id id, const delivery_ref& d, int64_t now_ms,
                notifier_effects& out) {
    auto ci = consumers_.find(id);
    if (ci == consumers_.end())
      return false;
    auto hi = ci->second.held.find(d);
    if (hi == ci->second.held.end())
      return false;
    auto& t = release(id, ci->second, hi);
    forget_if_idle(id);
    make_ready(t);
    pump(now_ms, out);
    return true;
  }

  void failed(consumer_id id, const delivery_ref& d, bool timeout,
              int64_t now_ms, notifier_effects& out) {
    auto ci = consumers_.find(id);
    if (ci == consumers_.end())
      return;
    auto& c = ci->second;
    std::vector<topic_state*> touched;
    if (auto hi = c.held.find(d); hi != c.held.end()) {
      touched.push_back(&release(id, c, hi));
      if (!timeout)
        out.requeue.push_back(d);
    }
    if (!timeout) {
      // The consumer is gone: send it nothing new before consumer_down
      // arrives (each such send would fail too and use up an attempt).
      touched.insert(touched.end(), c.topics.begin(), c.topics.end());
      leave_all(id, c, true, out);
    }
    forget_if_idle(id);
    for (auto* t : touched)
      make_ready(*t);
    pump(now_ms, out);
  }

  void expire(int64_t now_ms, notifier_effects& out) {
    for (auto& [name, t] : topics_)
      if (return_overdue_front(t, now_ms, out))
        refresh(t, out);
  }

  int64_t next_expiry_ms() const {
    auto next = never_ms;
    for (const auto& [name, t] : topics_)
      if (!t.queue.empty())
        next = std::min(next, return_at(*t.queue.front()));
    return next;
  }

  std::map<std::string, topic_counters> counters() const {
    std::map<std::string, topic_counters> result;
    for (const auto& [name, t] : topics_) {
      if (t.members.empty() && t.queue.empty() && t.in_flight == 0 &&
          t.delivered == 0 && t.expired == 0)
        continue;
      auto& c = result[name];
      c.consumers = static_cast<uint32_t>(t.members.size());
      c.queued = t.queue.size();
      c.in_flight = t.in_flight;
      c.delivered = t.delivered;
      c.expired = t.expired;
    }
    return result;
  }

  notifier_options opts_;
  /// Topics are never erased: their nodes stay put for the pointers below.
  std::unordered_map<std::string, topic_state> topics_;
  std::unordered_map<consumer_id, consumer_state> consumers_;
  /// Topics with queued deliveries awaiting a turn (round robin).
  std::deque<topic_state*> ready_;
  topic_state* last_ = nullptr;
  uint64_t total_ = 0;
  uint64_t seq_ = 0;
};

notifier_logic::notifier_logic(notifier_options opts)
  : impl_(std::make_unique<impl>(opts)) {}

notifier_logic::~notifier_logic() = default;

void notifier_logic::set_consumers(const std::string& topic,
                                   std::vector<consumer_slot> consumers,
                                   int64_t now_ms, notifier_effects& out) {
  impl_->set_consumers(topic, std::move(consumers), now_ms, out);
}

void notifier_logic::consumer_down(consumer_id id, int64_t now_ms,
                                   notifier_effects& out) {
  impl_->consumer_down(id, now_ms, out);
}

void notifier_logic::deliver(std::vector<delivery_box> batch, int64_t now_ms,
                             notifier_effects& out) {
  impl_->deliver(batch, now_ms, out);
}

bool notifier_logic::answered(consumer_id id, const delivery_ref& d,
                              int64_t now_ms, notifier_effects& out) {
  return impl_->answered(id, d, now_ms, out);
}

void notifier_logic::failed(consumer_id id, const delivery_ref& d, bool timeout,
                            int64_t now_ms, notifier_effects& out) {
  impl_->failed(id, d, timeout, now_ms, out);
}

void notifier_logic::expire(int64_t now_ms, notifier_effects& out) {
  impl_->expire(now_ms, out);
}

int64_t notifier_logic::next_expiry_ms() const {
  return impl_->next_expiry_ms();
}

std::map<std::string, topic_counters> notifier_logic::counters() const {
  return impl_->counters();
}

size_t notifier_logic::in_flight() const noexcept {
  return impl_->total_;
}

} // namespace dally::logic
