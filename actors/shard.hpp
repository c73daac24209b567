#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <caf/actor.hpp>
#include <caf/behavior.hpp>
#include <caf/fwd.hpp>

#include "logic/engine_config.hpp"
#include "storage/store_options.hpp"

namespace dally::actors {

/// What a shard actor needs to start.
struct shard_setup {
  uint32_t index = 0;
  storage::store_options store;
  logic::shard_options opts;
  /// Told (shard_up_msg) once the store is open and the shard serves.
  caf::actor engine;
  caf::actor supervisor;
  /// Deliveries of a topic go to notifiers[core::notifier_of(topic, size)].
  std::vector<caf::actor> notifiers;
  std::function<int64_t()> wall_clock_ms;
  /// One log line (see engine_config::log).
  std::function<void(const std::string&)> log;
  /// Opens the store (see engine_config::open_store); empty: RocksDB.
  logic::store_opener open_store;
};

/// Spawns a shard actor: it opens its store (quitting with the error if it
/// cannot, for the supervisor to decide), announces itself to the engine
/// and the supervisor, recovers its window from the store and then serves
/// the engine's requests through a `shard_logic`, doing what its
/// `shard_driver` decides: one armed wake-up at a time, re-armed when the
/// earliest work moves; group commit through a self-sent flush message,
/// with every reply held until its batch is durable; deliveries sent only
/// after their in-flight state is durable.
caf::actor spawn_shard(caf::actor_system& sys, shard_setup setup);

} // namespace dally::actors
