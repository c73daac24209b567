#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>

#include "logic/engine_reports.hpp"
#include "logic/notifier_logic.hpp"
#include "logic/release_queue.hpp"
#include "logic/shard_driver.hpp"
#include "logic/shard_logic.hpp"
#include "net/engine_actor.hpp"
#include "proto/dally_api.pb.h"

// Messages between the actors of one node. They never leave the process,
// so they are plain structs (allowed as unsafe message types: CAF may not
// serialize them, and nothing does).

namespace dally::actors {

using flush_atom = caf::atom_constant<caf::atom("flush")>;
using wake_atom = caf::atom_constant<caf::atom("wake")>;
using maintain_atom = caf::atom_constant<caf::atom("maintain")>;
using expire_atom = caf::atom_constant<caf::atom("expire")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using overdue_atom = caf::atom_constant<caf::atom("overdue")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using topics_atom = caf::atom_constant<caf::atom("topics")>;
using ready_atom = caf::atom_constant<caf::atom("ready")>;
/// Asks the engine for its shard actors (tests kill them to exercise the
/// supervisor).
using shards_atom = caf::atom_constant<caf::atom("shards")>;

/// Shard -> notifier: deliveries fired by one commit, in due order, each
/// to be released at its due time unless its shard cancels it first.
struct deliver_batch {
  std::vector<logic::held_delivery> items;
};

/// Notifier -> engine -> shard: the consumer holding a delivery died.
struct requeue_msg {
  logic::delivery_ref ref;
};

/// Notifier -> engine -> shard: nobody could take a delivery.
struct undelivered_msg {
  logic::delivery_ref ref;
};

/// Notifier -> engine -> shards: whether a topic can take deliveries.
/// Routed through the engine so that it reaches a shard before any
/// undelivered_msg the notifier sends after it.
struct topic_status_msg {
  std::string topic;
  bool available = false;
};

/// One consumer of a topic, as the registry tells its notifier.
struct consumer_entry {
  consumer_actor handle;
  uint32_t max_in_flight = 1;
  /// Deliveries per message; above 1 only for a batch_consumer_actor.
  uint32_t max_batch = 1;
};

/// Registry -> notifier: the consumers of one topic now.
struct consumers_msg {
  std::string topic;
  std::vector<consumer_entry> consumers;
};

/// One verdict of a batch consumer, for the task's shard.
using settle_item = logic::verdict;

/// Notifier -> shard (through the engine until the shard has announced
/// itself): the acks and nacks of one batch answer for that shard's tasks,
/// in one message instead of one each.
struct settle_batch_msg {
  std::vector<settle_item> items;
};

/// Registry -> notifiers: a consumer died.
struct consumer_down_msg {
  logic::consumer_id id = 0;
};

/// Shard -> engine, supervisor and notifiers: shard `index` runs as
/// `shard` (first start or restart).
struct shard_up_msg {
  uint32_t index = 0;
  caf::actor shard;
};

/// Shard -> engine: shard `index` answered `tasks` of the new tasks the
/// engine passed it (see logic::schedule_admission); sent once per commit
/// that answers some, and at once for those answered without one.
struct schedules_answered_msg {
  uint32_t index = 0;
  uint64_t tasks = 0;
};

/// Supervisor -> engine: shard `index` failed and is not restarted (yet).
struct shard_down_msg {
  uint32_t index = 0;
  caf::error reason;
};

/// Engine -> supervisor: run shard `index` (the node owns it now). A first
/// open that finds the store locked is retried with backoff: the shard's
/// previous owner may not have closed it yet.
struct open_shard_msg {
  uint32_t index = 0;
};

/// Engine -> supervisor: stop shard `index` (the node lost it); the shard
/// flushes and closes its store, then the supervisor answers with
/// shard_closed_msg.
struct close_shard_msg {
  uint32_t index = 0;
};

/// Supervisor -> engine: shard `index` is stopped and its store closed.
struct shard_closed_msg {
  uint32_t index = 0;
};

/// Shard -> engine: a shard's numbers, for stats.
using shard_stats_msg = logic::shard_report;

/// Notifier -> engine: a notifier's numbers, for stats.
using notifier_stats_msg = logic::notifier_report;

/// Engine -> tests: the current shard actors (null while restarting).
struct shard_handles_msg {
  std::vector<caf::actor> shards;
};

/// Registry -> engine: consumers per topic, for stats.
struct topic_consumers_msg {
  std::map<std::string, uint32_t> counts;
};

} // namespace dally::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::topic_consumers_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::shard_handles_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::deliver_batch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::requeue_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::undelivered_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::topic_status_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::consumers_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::settle_batch_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::consumer_down_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::shard_up_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::shard_down_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::schedules_answered_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::open_shard_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::close_shard_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::shard_closed_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::shard_stats_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(dally::actors::notifier_stats_msg)
