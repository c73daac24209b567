#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/delivery_policy.hpp"
#include "core/placement.hpp"
#include "core/result.hpp"
#include "core/task_lifecycle.hpp"
#include "core/task_limits.hpp"
#include "storage/due_window.hpp"
#include "storage/store_options.hpp"
#include "storage/task_store.hpp"

namespace dally::logic {

/// Opens one shard's store.
using store_opener =
  std::function<core::result<std::unique_ptr<storage::task_store>>(
    const storage::store_options&)>;

/// Opens a shard's store with `open`, or as a RocksDB store when it is
/// empty.
core::result<std::unique_ptr<storage::task_store>>
open_shard_store(const store_opener& open, const storage::store_options& opts);

/// How one shard works (in the manner of rocksdb::Options: plain fields
/// with documented defaults).
struct shard_options {
  /// What part of the due index lives in memory.
  storage::due_window_options window;

  /// Limits every incoming task must meet.
  core::task_limits limits;

  /// Used for tasks scheduled without a policy of their own.
  core::delivery_policy default_policy;

  /// Most due tasks fired per wake-up; the shard yields to other messages
  /// between batches.
  size_t fire_batch = 1024;

  /// How long an idempotency key is remembered after its task was
  /// scheduled (one day).
  int64_t key_retention_ms = 24 * 3600 * 1000;

  /// A task overdue by more than this when the shard starts is backlog
  /// (from the downtime) and fires at the paced rate below, in due order;
  /// every task due later fires at once, however late a loaded shard is
  /// (pacing those too would cap an overloaded shard below its load, so
  /// that it never catches up).
  int64_t late_threshold_ms = 1000;

  /// Backlog tasks fired per second per shard; 0: no pacing.
  uint32_t overdue_rate_per_s = 20'000;

  /// Most backlog entries (16 bytes each) held in memory waiting for their
  /// paced turn; beyond it, popping pauses until the backlog drains.
  size_t max_backlog = 1'000'000;

  /// Page size of dead_letters when the request gives none.
  size_t dead_letter_page = 100;

  /// Deliveries of one topic this shard fired that are not answered yet
  /// (ack, nack, lease expiry or given back unsent). At the cap the topic's
  /// due tasks wait in the shard until half of them are answered, so a
  /// shard never fires faster than the topic's consumers take: what its
  /// notifier would only queue, or send back, stays on disk. 0: no cap (the
  /// engine sets its share of engine_config::max_unanswered_per_topic).
  size_t max_unanswered_per_topic = 0;

  /// Memory for committed records the shard will soon need: those of
  /// in-flight tasks (an ack, nack, touch or lease expiry then reads
  /// nothing) and of tasks due within `hot_horizon_ms` of their commit
  /// (firing them reads nothing). Counted as each record's size plus its
  /// strings; a record that does not fit is read from the store when
  /// needed. 0: no cache.
  size_t record_cache_bytes = 32 << 20;

  /// See record_cache_bytes.
  int64_t hot_horizon_ms = 5'000;

  /// How far ahead of its due time a task may be fired: its in-flight
  /// record is committed (fsync included) up to this long before it is due
  /// and the delivery is held in the shard until the due time, so the
  /// commit is off the path of the task's lateness and commits under a
  /// steady stream carry more tasks. The shard looks ahead at most every
  /// quarter of this. Until its due time a held task is still revoked or
  /// rescheduled with the outcome `done`. 0: fire at the due time.
  int64_t fire_lead_ms = 32;

  /// The life cycle of the shard's tasks (what a fire, an ack, a nack, ...
  /// does to a record). Null: core::task_lifecycle::standard(), the one of
  /// the delivery contract. Only the simulator's self-test sets another (a
  /// subclass with a planted bug, see sim/planted.hpp); it is shared by
  /// every shard.
  std::shared_ptr<const core::task_lifecycle> lifecycle;
};

/// Everything needed to start an engine on one node: the embedding facade
/// takes it as is, dallyd fills it from its config file and flags.
struct engine_config {
  /// Where the shards keep their stores, one sub-directory each.
  std::string data_dir = "dally-data";

  /// Fixed when the data directory is created; reopening with another
  /// count fails.
  uint32_t shard_count = 4;

  /// This node's id in its cluster's shard maps (0 for a single node).
  core::node_id node_id = 0;

  /// True: the engine starts owning every shard (the single-node map at
  /// epoch 0), as a node outside a cluster. False: it opens no shard until
  /// it is given a shard map (actors::install_map_msg), and answers every
  /// task request with `unavailable` until then.
  bool open_all_shards = true;

  /// How long the engine waits for another node's engine to answer a
  /// request it forwarded there; then the request fails with `unavailable`
  /// (it may have been done: retry it with its idempotency key).
  int64_t forward_timeout_ms = 10'000;

  storage::durability durability = storage::durability::sync;

  /// With durability::periodic: the longest a write stays unsynced.
  int64_t sync_period_ms = 100;

  /// RocksDB memory per shard.
  size_t write_buffer_bytes = 16 << 20;
  size_t block_cache_bytes = 32 << 20;

  /// Due-index entries of new tasks a shard's store may leave unwritten
  /// while the task is in memory (storage::store_options); 0: none.
  size_t max_deferred_index = size_t{1} << 16;

  /// The `tasks` family's memtable as a B-tree (see
  /// storage::store_options::btree_task_memtable); false: RocksDB's skip
  /// list.
  bool btree_task_memtable = true;

  /// RocksDB's flushes and compactions at the lowest CPU priority (see
  /// storage::store_options::background_at_low_priority: it applies to
  /// every RocksDB database in the process).
  bool rocksdb_background_at_low_priority = true;

  shard_options shard;

  /// Notifier actors delivering fired tasks; topics are spread over them.
  uint32_t notifiers = 2;

  /// Deliveries a consumer may hold unanswered (per topic), unless it asks
  /// for fewer when subscribing.
  uint32_t max_in_flight_per_consumer = 1000;

  /// Deliveries per message to a batch consumer (batch_consumer_actor)
  /// that leaves `max_batch` at 0 when subscribing; 1 to 1024. Batches
  /// form only when several deliveries wait for the consumer at once, so
  /// a batch never holds a delivery back.
  uint32_t default_max_batch = 64;

  /// Deliveries held unanswered across all consumers of one notifier;
  /// beyond it, fired tasks wait in the notifier's queue.
  uint32_t max_in_flight_total = 100'000;

  /// Fired deliveries of one topic a notifier queues beyond what its
  /// consumers hold (shards stop firing the topic once its consumers' slots
  /// are queued; this bounds what they fired before they heard). More go
  /// back to their shard.
  uint32_t max_queued_per_topic = 10'000;

  /// Deliveries of one topic fired and not answered yet, across the shards
  /// (each gets an equal share, see shard_options). Keep it at most
  /// max_queued_per_topic plus what the topic's consumers hold, so that no
  /// delivery has to go back. 0: no cap.
  uint32_t max_unanswered_per_topic = 10'000;

  /// New tasks (schedules, tasks of batches) a shard may have been passed
  /// and not answered yet, in its mailbox or waiting for their commit;
  /// beyond it the engine refuses schedules for that shard with
  /// `overloaded` before they reach it, so that a client that sends
  /// without waiting for answers cannot grow the node's memory without
  /// bound. About a second of a shard's work when it commits in large
  /// batches, far above what a client with a bounded number of open
  /// requests holds there. Counts tasks, not bytes. 0: no bound.
  size_t max_pending_per_shard = 65'536;

  /// Restarts of one shard within a minute before the supervisor gives up
  /// on it (its requests then fail with `unavailable`).
  uint32_t max_restarts_per_minute = 10;

  /// The UTC wall clock in ms that due times are measured against. Empty:
  /// the system clock. Tests and the simulator inject one that follows the
  /// actor system's (virtual) clock. Waiting always happens on the actor
  /// clock and is re-checked against this one on wake-up, so a wall-clock
  /// step neither fires a burst early nor stalls.
  std::function<int64_t()> wall_clock_ms;

  /// Where the engine's own log lines go (a wall-clock step, a failed
  /// housekeeping); each call is one line. Empty: stderr.
  std::function<void(const std::string&)> log;

  /// Replaces RocksDB's file system in every shard's store (tests inject
  /// faults through it).
  std::shared_ptr<rocksdb::FileSystem> file_system;

  /// Opens each shard's store. Empty: a RocksDB store
  /// (storage::rocks_task_store). This is the seam for wrapping a store in
  /// one that sees every read and write on its way: the simulator's
  /// self-test plants a bug in a store this way (sim/planted.hpp), and a
  /// cluster's replication will wrap each shard's store.
  store_opener open_store;
};

/// The system clock as UTC ms.
int64_t system_wall_clock_ms();

/// The options of each shard of `cfg`: `cfg.shard`, with its share of
/// `cfg.max_unanswered_per_topic` unless it sets its own.
shard_options shard_options_of(const engine_config& cfg);

/// The life cycle `opts` gives its shard (see shard_options::lifecycle).
const core::task_lifecycle& lifecycle_of(const shard_options& opts) noexcept;

} // namespace dally::logic
