#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "logic/delivery_box.hpp"
#include "logic/shard_logic.hpp"
#include "proto/dally_api.pb.h"

namespace dally::logic {

/// A consumer as a notifier_logic knows it; the notifier maps ids to handles
/// (the CAF actor id).
using consumer_id = uint64_t;

/// One consumer of a topic and how many deliveries of the topic it may
/// hold unanswered.
struct consumer_slot {
  consumer_id id = 0;
  uint32_t max_in_flight = 1;

  friend bool operator==(const consumer_slot&, const consumer_slot&) = default;
};

/// What a notifier_logic asks its notifier actor to do. The notifier_logic
/// appends; the actor acts on everything and clears it.
struct notifier_effects {
  /// Deliveries to send now, each to one consumer.
  std::vector<std::pair<consumer_id, delivery_box>> send;
  /// Deliveries whose consumer died: due again at once (shard `requeue`).
  std::vector<delivery_ref> requeue;
  /// Deliveries nobody could take: pending again, attempt not counted
  /// (shard `undelivered`).
  std::vector<delivery_ref> undelivered;
  /// Topic availability changes for every shard, in order.
  std::vector<std::pair<std::string, bool>> availability;

  bool empty() const noexcept {
    return send.empty() && requeue.empty() && undelivered.empty() &&
           availability.empty();
  }

  void clear() {
    send.clear();
    requeue.clear();
    undelivered.clear();
    availability.clear();
  }
};

/// How much a notifier_logic lets wait and run.
struct notifier_options {
  /// Deliveries awaiting an answer across all consumers of this notifier_logic.
  uint32_t max_in_flight_total = 100'000;
  /// Deliveries of one topic queued here; more go back to their shard.
  uint32_t max_queued_per_topic = 10'000;
};

/// Counters of one topic.
struct topic_counters {
  uint32_t consumers = 0;
  uint64_t queued = 0;
  uint64_t in_flight = 0;
  uint64_t delivered = 0;
  /// Given back unsent after waiting half their lease in the queue (their
  /// shards take them back without counting the attempt).
  uint64_t expired = 0;
};

/// The logic of one notifier actor, free of CAF: it hands fired deliveries
/// to the consumers of their topics without ever blocking a shard.
///
/// Each consumer holds at most its `max_in_flight` unanswered deliveries of
/// a topic, and the notifier_logic at most `max_in_flight_total`; the rest wait
/// in a per-topic FIFO queue. When a topic's queue reaches as many entries
/// as its consumers may hold together (its soft bound), the topic is
/// announced unavailable, so shards park its further tasks in memory (no
/// attempt is used up, nothing is written); deliveries they fired before
/// they heard are still queued, up to `max_queued_per_topic`. A delivery
/// beyond that, and every delivery of a topic without consumers, goes back
/// to its shard as undelivered. The topic is announced available again
/// once its queue is down to half its soft bound and it has a consumer. A
/// queued delivery that has waited half its lease goes back undelivered
/// too (see `expire`): a delivery no consumer saw uses up no attempt. The
/// first announcement of a topic always goes out (a new
/// notifier_logic cannot know what shards were told).
///
/// Among the consumers of a topic with free slots, the one with the fewest
/// unanswered deliveries gets the next one (ties: round robin), so several
/// consumers of a topic share its load. When the total cap is reached,
/// topics with queued deliveries take turns (round robin, one delivery per
/// turn) as slots free up, so no topic starves another.
class notifier_logic {
public:
  explicit notifier_logic(notifier_options opts = {});

  notifier_logic(const notifier_logic&) = delete;
  notifier_logic& operator=(const notifier_logic&) = delete;

  ~notifier_logic();

  /// Replaces the consumers of `topic` (an empty list: none left). A
  /// consumer removed from the list keeps the deliveries it holds (it may
  /// still answer them); queued deliveries go to the new list.
  void set_consumers(const std::string& topic,
                     std::vector<consumer_slot> consumers, int64_t now_ms,
                     notifier_effects& out);

  /// A consumer died: it leaves every topic and each delivery it held is
  /// requeued, in the order they were sent.
  void consumer_down(consumer_id id, int64_t now_ms, notifier_effects& out);

  /// Deliveries a shard fired, in due order. One that arrives past half its
  /// lease goes back undelivered, as `expire` would give it back (a lease
  /// deadline of 0 never runs out).
  void deliver(std::vector<delivery_box> batch, int64_t now_ms,
               notifier_effects& out);

  /// `id` answered `d` (any verdict): its slot is free. False if `d` was
  /// not outstanding at `id` (already timed out or requeued); the actor
  /// still forwards an ack or nack, which the shard judges.
  bool answered(consumer_id id, const delivery_ref& d, int64_t now_ms,
                notifier_effects& out);

  /// Sending `d` to `id` failed. A timeout frees the slot (the lease
  /// decides what happens to the task); any other failure means the
  /// consumer is gone: the delivery is requeued (only if `id` still held
  /// it, so nothing is requeued twice) and `id` leaves its topics at once,
  /// keeping what it holds (requeued by `consumer_down`), so that no new
  /// delivery goes to it and fails too, using up an attempt.
  void failed(consumer_id id, const delivery_ref& d, bool timeout,
              int64_t now_ms, notifier_effects& out);

  /// Gives back, as undelivered, queued deliveries that have waited half
  /// their lease (checking the front of each topic's queue), so that their
  /// shards take them back, with the attempt not counted, before their own
  /// lease timers redeliver them with the next one.
  void expire(int64_t now_ms, notifier_effects& out);

  /// When `expire` next has work: the earliest half-lease point among the
  /// fronts of the queues; INT64_MAX when nothing is queued.
  int64_t next_expiry_ms() const;

  /// Counters per topic (topics with consumers, queued or held
  /// deliveries, or deliveries so far).
  std::map<std::string, topic_counters> counters() const;

  /// Deliveries awaiting an answer.
  size_t in_flight() const noexcept;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace dally::logic
