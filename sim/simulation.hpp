#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "logic/engine_config.hpp"
#include "sim/oracle.hpp"
#include "sim/planted.hpp"
#include "sim/prng.hpp"

namespace dally::sim {

/// How one run goes, every field drawn from the seed (see draw): the
/// engine's shape, the workload, the consumers' behaviour and the faults.
/// Rates are per million, so that every decision is an integer draw.
struct sim_params {
  uint32_t shards = 2;
  uint32_t notifiers = 1;
  uint32_t topics = 1;
  uint32_t consumers_per_topic = 1;
  /// Schedules sent during the fault phase.
  uint32_t tasks = 40;
  uint32_t revokes = 5;
  uint32_t reschedules = 5;
  /// True time the fault phase lasts; the liveness phase follows.
  int64_t fault_phase_ms = 60'000;
  uint32_t crashes = 1;
  uint32_t disk_faults = 1;
  uint32_t clock_steps = 2;
  int64_t max_skew_ms = 1'000;
  /// Client <-> engine links.
  int64_t net_max_delay_ms = 20;
  uint32_t net_drop_ppm = 0;
  uint32_t net_duplicate_ppm = 0;
  uint32_t partitions = 0;
  uint32_t clogs = 0;
  /// What a consumer does with a delivery in the fault phase (the rest of
  /// a million: ack).
  uint32_t nack_ppm = 0;
  uint32_t slow_ppm = 0;
  uint32_t hang_ppm = 0;
  uint32_t crash_ppm = 0;
  /// Delivery policy bounds of the tasks.
  int64_t max_lease_ms = 2'000;
  uint32_t max_attempts = 4;
  /// Chance per crash that one acknowledged task's stored record is
  /// damaged while the engine is down.
  uint32_t damage_ppm = 0;
  /// Time passing while actors work: before a step, with this chance, the
  /// clock moves on to the next timer if it is at most `slow_step_ms` away
  /// and fires it, so that a timer can arrive while, say, a commit is
  /// under way on the committer (otherwise time moves only when every
  /// actor is idle).
  uint32_t slow_step_ppm = 0;
  int64_t slow_step_ms = 0;
  /// The stores' bound on deferred due-index entries
  /// (storage::store_options::max_deferred_index): 0 defers nothing, small
  /// bounds write entries a commit or two after their task.
  size_t max_deferred_index = 0;
  /// Deliveries per message: above 1, the consumers subscribe as batch
  /// consumers (dally::batch_consumer_actor) with this `max_batch`.
  uint32_t max_batch = 0;
  /// The engine's cap on unanswered deliveries per topic
  /// (engine_config::max_unanswered_per_topic); 0: the default (10,000,
  /// which these runs never reach). A small cap keeps topics saturated,
  /// their tasks parked and taken up again as answers come.
  uint32_t max_unanswered_per_topic = 0;
  /// What a consumer does with a delivery in the fault phase, after the
  /// rates above: answer `later`, touch it through the engine (extending or
  /// shortening its lease), then ack through the engine or fall silent.
  uint32_t touch_ppm = 0;
  /// Steps of the wall clock of seconds to hours (beyond the skew above),
  /// forward or back, each of at most `clock_jump_max_ms`; in half of them
  /// the clock returns by the same amount 1 to 30 s later (a wrong clock
  /// set right), at the latest at the heal.
  uint32_t clock_jumps = 0;
  int64_t clock_jump_max_ms = 0;
  /// The wall clock runs fast (or slow, below 0) against true time by this
  /// many millionths.
  int64_t clock_drift_ppm = 0;
  /// Engine nodes of a cluster run (0: one engine, no cluster). A cluster
  /// run has no clock jumps and no damaged records (see
  /// docs/simulation.md).
  uint32_t nodes = 0;
  /// Shard map changes clients ask the coordinator for (a member marked
  /// leaving, or active again), in a cluster run.
  uint32_t map_changes = 0;

  /// Draws every field from `gen`.
  static sim_params draw(prng& gen);

  /// Draws a cluster run's shape from `gen`, after `draw`: `nodes` nodes
  /// (0: 3 to 5, drawn), more shards than nodes, node crashes.
  void draw_cluster(prng& gen, uint32_t nodes_asked);

  /// One line, `name=value` pairs.
  std::string describe() const;
};

/// The command line's say over a run.
struct sim_options {
  uint64_t seed = 0;
  /// A bug planted in the engine, for the self-test.
  planted_bug plant = planted_bug::none;
  /// Where the run's data directory goes (a fresh one, removed after).
  std::string data_root;
  /// Print every event as it happens.
  bool verbose = false;
  /// A cluster run: `nodes` engine nodes (3 to 5), or with `cluster` as
  /// many as the seed draws. Neither: one engine.
  uint32_t nodes = 0;
  bool cluster = false;
};

struct sim_result {
  sim_params params;
  /// The event log's hash: the same seed and binary give the same one.
  std::string hash;
  uint64_t events = 0;
  uint64_t steps = 0;
  uint64_t deliveries = 0;
  uint64_t acknowledged = 0;
  uint32_t restarts = 0;
  /// Stored records damaged (see sim_params::damage_ppm).
  uint32_t damaged = 0;
  std::optional<violation> failure;
  /// The last events before the end (or the failure), oldest first.
  std::vector<std::string> last_events;
};

/// One deterministic run: the real engine, notifier and shard actors on
/// CAF's test_coordinator, the next ready actor picked by the seed; true
/// time and the engine's (drifting, stepping) wall clock both virtual;
/// RocksDB on the fault-injecting file system (a crash keeps only what
/// was synced, and a record may be damaged while it is down); clients
/// behind a simulated network; consumers that ack,
/// nack, dawdle, hang or die. A fault phase, then everything heals and a
/// liveness phase runs; the oracle checks every delivery as it happens and
/// every acknowledged task at the end.
sim_result run_simulation(const sim_options& opts);

} // namespace dally::sim
