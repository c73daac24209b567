// dallyd: one Dally node. Opens the shards' stores under --data-dir, starts
// the engine and publishes it to remote CAF clients (dallyctl, other
// programs using net::connect_engine) on --address:--port.
//
// Output: stdout carries exactly one line, "dallyd listening on ADDR:PORT",
// once the node serves requests (scripts and tests parse it); everything
// else (start-up, recovery, shutdown) is logged to stderr. SIGTERM and
// SIGINT stop the node cleanly: every shard flushes and closes its store,
// then dallyd exits 0.
//
// Exit codes: 0 clean shutdown; 1 the node could not start (store locked by
// another dallyd, port in use, I/O error); 2 bad usage (unknown option, bad
// value).

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/config_option_set.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "actors/cluster_node.hpp"
#include "actors/embedded_engine.hpp"
#include "apps/cli_util.hpp"
#include "core/time_range.hpp"
#include "logic/engine_config.hpp"
#include "net/error.hpp"
#include "net/remote.hpp"
#include "net/tls.hpp"
#include "net/type_ids.hpp"
#include "runtime/heap_purger.hpp"
#include "runtime/retained_heap.hpp"
#include "runtime/setup.hpp"
#include "runtime/watchdog.hpp"

namespace dally::apps {

namespace {

constexpr int exit_ok = 0;
constexpr int exit_start_failed = 1;
constexpr int exit_usage = 2;

/// Every setting of a node. The options live in the category "?dally": on
/// the command line they need no prefix (`--port=7400`, or `--port 7400`
/// after `join_option_values`), in a config file they sit in a [dally]
/// section.
class dallyd_config : public caf::actor_system_config {
public:
  std::string data_dir = "./dally-data";
  std::string address = "127.0.0.1";
  uint16_t port = 7400;
  size_t shards = 4;
  std::string durability = "sync";
  int64_t sync_period_ms = 100;
  int64_t window_ms = 5 * 60 * 1000;
  size_t max_in_memory = 1'000'000;
  int64_t late_threshold_ms = 1000;
  size_t overdue_rate = 20'000;
  int64_t fire_lead_ms = 32;
  int64_t lease_ms = 30'000;
  size_t max_attempts = 10;
  int64_t backoff_initial_ms = 1000;
  int64_t backoff_max_ms = 600'000;
  size_t max_payload_bytes = size_t{1} << 20;
  size_t max_topic_bytes = 256;
  size_t notifiers = 2;
  size_t max_in_flight_per_consumer = 1000;
  size_t default_max_batch = 64;
  size_t max_in_flight_total = 100'000;
  size_t max_queued_per_topic = 10'000;
  size_t max_unanswered_per_topic = 10'000;
  size_t max_pending_per_shard = 65'536;
  size_t write_buffer_mb = 16;
  std::string task_memtable = "btree";
  size_t block_cache_mb = 32;
  size_t record_cache_mb = 32;
  size_t max_message_bytes = size_t{64} << 20;
  size_t max_connections = 1024;
  size_t idle_eviction_ms = 10'000;
  size_t max_pending_connections = 128;
  size_t handshake_timeout_ms = 5000;
  size_t idle_timeout_ms = 0;
  size_t max_partial_bytes = size_t{256} << 20;
  size_t max_front_door_backlog = net::front_door::default_max_backlog;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  bool insecure = false;
  size_t node_id = 0;
  std::string cluster_seeds;
  std::string cluster_listen;
  size_t cluster_shards = 64;
  int64_t heartbeat_ms = 200;
  int64_t unreachable_ms = 1000;
  int64_t forward_timeout_ms = 5000;

  dallyd_config() {
    opt_group group{custom_options_, "?dally"};
    add_node_options(group);
    add_window_options(group);
    add_task_options(group);
    add_delivery_options(group);
    add_memory_options(group);
    add_connection_options(group);
    add_cluster_options(group);
  }

  const caf::config_option_set& options() const noexcept {
    return custom_options_;
  }

private:
  /// Options of a cluster node (docs/cluster.md); none: a single node.
  void add_cluster_options(opt_group& group) {
    group
      .add(node_id, "node-id",
           "this node's id: one in --cluster-seeds, or another to join as "
           "a learner (with --cluster-listen)")
      .add(cluster_seeds, "cluster-seeds",
           "the cluster's voters, ID@HOST:PORT,...: each node's cluster "
           "address, which it listens on for the other nodes")
      .add(cluster_listen, "cluster-listen",
           "HOST:PORT: the cluster address of a learner, a node whose id "
           "is not in --cluster-seeds")
      .add(cluster_shards, "cluster-shards",
           "shard count of a new cluster, fixed when it is created "
           "(default 64)")
      .add(heartbeat_ms, "heartbeat-ms",
           "heartbeats between cluster nodes (default 200)")
      .add(unreachable_ms, "unreachable-ms",
           "a silent cluster node is unreachable after this (default 1000)")
      .add(forward_timeout_ms, "forward-timeout-ms",
           "a request forwarded to a shard's owner fails with unavailable "
           "when the owner has not answered within this (default 5000)");
  }

  /// Options for where the node keeps its data, where it listens, durability.
  void add_node_options(opt_group& group) {
    group
      .add(data_dir, "data-dir",
           "where the shards keep their stores (default ./dally-data)")
      .add(address, "address",
           "address to listen on (default 127.0.0.1; 0.0.0.0: all)")
      .add(port, "port", "TCP port (default 7400; 0: pick a free one)")
      .add(shards, "shards",
           "shard count, fixed when the data dir is created (default 4)")
      .add(durability, "durability",
           "sync | periodic | none: when writes are fsync'd; none skips "
           "the fsync but still writes the WAL (default sync)")
      .add(sync_period_ms, "sync-period-ms",
           "with periodic durability: longest a write stays unsynced "
           "(default 100)");
  }

  /// Options for what the shards keep in memory and when they fire.
  void add_window_options(opt_group& group) {
    group
      .add(window_ms, "window-ms",
           "tasks due within this many ms are kept in memory "
           "(default 300000)")
      .add(max_in_memory, "max-in-memory",
           "most tasks one shard keeps in memory (default 1000000)")
      .add(late_threshold_ms, "late-threshold-ms",
           "tasks overdue by more than this fire at the overdue rate "
           "(default 1000)")
      .add(overdue_rate, "overdue-rate",
           "overdue tasks fired per second per shard; 0: unpaced "
           "(default 20000)")
      .add(fire_lead_ms, "fire-lead-ms",
           "tasks due within this many ms are committed as fired ahead of "
           "time and delivered when due; 0: at the due time (default 32)");
  }

  /// Options for the default delivery policy and the limits of one task.
  void add_task_options(opt_group& group) {
    group
      .add(lease_ms, "lease-ms",
           "default lease: a delivery not settled within it is redelivered "
           "(default 30000)")
      .add(max_attempts, "max-attempts",
           "default deliveries before a task becomes a dead letter "
           "(default 10)")
      .add(backoff_initial_ms, "backoff-initial-ms",
           "default wait before the first retry (default 1000)")
      .add(backoff_max_ms, "backoff-max-ms",
           "default longest wait between retries (default 600000)")
      .add(max_payload_bytes, "max-payload-bytes",
           "largest accepted payload (default 1048576)")
      .add(max_topic_bytes, "max-topic-bytes",
           "longest accepted topic (default 256)");
  }

  /// Options for the notifiers and their caps.
  void add_delivery_options(opt_group& group) {
    group
      .add(notifiers, "notifiers",
           "actors delivering fired tasks to consumers (default 2)")
      .add(max_in_flight_per_consumer, "max-in-flight-per-consumer",
           "unanswered deliveries one consumer may hold (default 1000)")
      .add(default_max_batch, "default-max-batch",
           "deliveries per message to a batch consumer that asks for no "
           "size (default 64, at most 1024)")
      .add(max_in_flight_total, "max-in-flight-total",
           "unanswered deliveries per notifier (default 100000)")
      .add(max_queued_per_topic, "max-queued-per-topic",
           "fired deliveries a notifier queues per topic beyond its "
           "consumers' slots (default 10000)")
      .add(max_unanswered_per_topic, "max-unanswered-per-topic",
           "fired and unanswered deliveries per topic across shards; 0: no "
           "cap (default 10000)")
      .add(max_pending_per_shard, "max-pending-per-shard",
           "new tasks a shard may hold unanswered before schedules for it "
           "fail with overloaded; 0: no bound (default 65536)");
  }

  /// Options for RocksDB's memory and the record cache.
  void add_memory_options(opt_group& group) {
    group
      .add(write_buffer_mb, "write-buffer-mb",
           "RocksDB memtable size per shard in MiB (default 16)")
      .add(task_memtable, "task-memtable",
           "btree | skiplist: how RocksDB keeps the tasks' memtable "
           "(default btree)")
      .add(block_cache_mb, "block-cache-mb",
           "RocksDB block cache per shard in MiB (default 32)")
      .add(record_cache_mb, "record-cache-mb",
           "records of in-flight and soon-due tasks kept in memory per "
           "shard, in MiB; 0: none (default 32)");
  }

  /// Options for client connections.
  void add_connection_options(opt_group& group) {
    group
      .add(max_message_bytes, "max-message-bytes",
           "largest message a client may send; a connection whose next "
           "message claims more is dropped (default 67108864)")
      .add(max_connections, "max-connections",
           "most client connections open at once; at the cap a new one "
           "replaces one without a request for --idle-eviction-ms, or is "
           "closed (default 1024)")
      .add(idle_eviction_ms, "idle-eviction-ms",
           "how long a connection must have sent no request before a new "
           "one may take its place at --max-connections (default 10000)")
      .add(max_pending_connections, "max-pending-connections",
           "most connections open that have not yet sent a request; a new "
           "one beyond closes the oldest of them (default 128)")
      .add(handshake_timeout_ms, "handshake-timeout-ms",
           "a connection that has not completed its handshake and sent a "
           "request within this is closed (default 5000)")
      .add(idle_timeout_ms, "idle-timeout-ms",
           "a connection that has sent no request for this long is closed; "
           "heartbeats do not count; 0: never (default 0)")
      .add(max_partial_bytes, "max-partial-bytes",
           "most bytes all connections together may hold in messages they "
           "have begun and not finished sending; a connection that would "
           "take more is closed (default 268435456)")
      .add(max_front_door_backlog, "max-front-door-backlog",
           "most client requests read and not yet taken by the engine; "
           "beyond it the node stops reading clients that send requests "
           "until the engine has taken half; 0: no bound (default 1024)")
      .add(tls_cert, "tls-cert",
           "PEM certificate (chain) of this node: TLS on the port, with "
           "--tls-key and --tls-ca")
      .add(tls_key, "tls-key", "PEM private key of --tls-cert")
      .add(tls_ca, "tls-ca",
           "PEM certificate authority that must have signed the clients' "
           "certificates")
      .add(insecure, "insecure",
           "serve without TLS on an --address other hosts can reach");
  }
};

/// UTC wall-clock time for log lines, e.g. 2026-11-22T10:00:00.123Z.
std::string log_stamp() {
  return core::format_time(wall_now_ms());
}

/// Writes one log line to stderr with a single write, so lines from the
/// main thread and the network thread never interleave.
void log_line(const std::string& text) {
  std::string line =
    log_stamp() + " dallyd[" + std::to_string(::getpid()) + "]: " + text + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

/// Logs at most one line a second, so that a flood of connections cannot
/// flood the log; the next line logged counts those left out.
class log_limiter {
public:
  void log(const std::string& text) {
    auto now = std::chrono::steady_clock::now();
    if (logged_once_ && now - last_ < std::chrono::seconds{1}) {
      ++skipped_;
      return;
    }
    logged_once_ = true;
    last_ = now;
    auto line = text;
    if (skipped_ > 0)
      line += " (" + std::to_string(skipped_) + " more since the last line)";
    skipped_ = 0;
    log_line(line);
  }

private:
  bool logged_once_ = false;
  std::chrono::steady_clock::time_point last_;
  uint64_t skipped_ = 0;
};

/// CAF's list of the options, saying where --help really prints.
std::string caf_help_text(const dallyd_config& cfg) {
  auto text = cfg.options().help_text(true);
  const std::string wrong = "print help text to STDERR and exit";
  if (auto pos = text.find(wrong); pos != std::string::npos)
    text.replace(pos, wrong.size(), "print this text and exit");
  return text;
}

void print_help(const dallyd_config& cfg) {
  std::cout
    << "usage: dallyd [options]\n"
       "\n"
       "Runs one Dally node: opens the stores under --data-dir, starts the\n"
       "engine and serves remote CAF clients (dallyctl) on --address:--port.\n"
       "Once it serves requests it prints one line to stdout:\n"
       "  dallyd listening on ADDRESS:PORT\n"
       "and logs everything else to stderr. SIGTERM or SIGINT stop it\n"
       "cleanly (stores flushed and closed, exit 0).\n"
       "\n"
       "Options are given as --name=value or --name value; every option may\n"
       "also be set in a config file, in a [dally] section (strings quoted):\n"
       "  [dally]\n"
       "  data-dir=\"/var/lib/dally\"\n"
       "  port=7400\n"
       "read from ./caf-application.ini when it exists, or from\n"
       "--config-file=FILE. Command-line flags override the file. CAF's own\n"
       "settings (scheduler, middleman) are listed by --long-help; the\n"
       "scheduler is CAF's own, with CAF's defaults.\n"
       "\n"
       "Durability: sync fsyncs every write a reply or a delivery depends on\n"
       "before it goes out; periodic fsyncs every --sync-period-ms; none\n"
       "never waits for an fsync. Every level writes RocksDB's WAL before it\n"
       "answers, so a crash of dallyd (kill -9 included) loses nothing it\n"
       "acknowledged; a power loss or kernel crash may lose what was not\n"
       "fsync'd yet.\n"
       "\n"
       "Exit codes: 0 clean shutdown, 1 could not start (store locked by\n"
       "another dallyd, address in use, I/O error), 2 bad usage.\n"
       "\n"
    << caf_help_text(cfg);
}

/// Names of the options that take a value, as CAF accepts them on the
/// command line ("port", "dally.port", "middleman.max-consecutive-reads").
std::set<std::string, std::less<>>
valued_option_names(const caf::config_option_set& opts) {
  std::set<std::string, std::less<>> out;
  for (const auto& opt : opts) {
    if (opt.is_flag())
      continue;
    auto name = std::string{opt.long_name().data(), opt.long_name().size()};
    auto category = std::string{opt.category().data(), opt.category().size()};
    if (!category.empty() && category.front() == '?')
      category.erase(0, 1);
    if (opt.has_flat_cli_name())
      out.insert(name);
    if (!category.empty() && category != "global")
      out.insert(category + "." + name);
  }
  return out;
}

/// The data dir, the shard count and durability.
std::optional<std::string> check_node_options(const dallyd_config& cfg,
                                              logic::engine_config& out) {
  if (cfg.data_dir.empty())
    return "--data-dir must not be empty";
  out.data_dir = cfg.data_dir;
  if (cfg.shards < 1 || cfg.shards > 4096)
    return "--shards must be in [1, 4096]";
  out.shard_count = static_cast<uint32_t>(cfg.shards);
  if (cfg.durability == "sync")
    out.durability = storage::durability::sync;
  else if (cfg.durability == "periodic")
    out.durability = storage::durability::periodic;
  else if (cfg.durability == "none")
    out.durability = storage::durability::none;
  else
    return "--durability must be sync, periodic or none, not '" +
           cfg.durability + "'";
  if (cfg.sync_period_ms < 1)
    return "--sync-period-ms must be at least 1";
  out.sync_period_ms = cfg.sync_period_ms;
  return std::nullopt;
}

/// The window, pacing and the fire lead of every shard.
std::optional<std::string> check_window_options(const dallyd_config& cfg,
                                                logic::engine_config& out) {
  if (cfg.window_ms < 1)
    return "--window-ms must be at least 1";
  out.shard.window.window_ms = cfg.window_ms;
  if (cfg.max_in_memory < 1)
    return "--max-in-memory must be at least 1";
  out.shard.window.max_in_memory = cfg.max_in_memory;
  if (cfg.late_threshold_ms < 0)
    return "--late-threshold-ms must not be negative";
  out.shard.late_threshold_ms = cfg.late_threshold_ms;
  if (cfg.overdue_rate > UINT32_MAX)
    return "--overdue-rate is too large";
  out.shard.overdue_rate_per_s = static_cast<uint32_t>(cfg.overdue_rate);
  if (cfg.fire_lead_ms < 0 || cfg.fire_lead_ms > 1000)
    return "--fire-lead-ms must be in [0, 1000]";
  out.shard.fire_lead_ms = cfg.fire_lead_ms;
  return std::nullopt;
}

/// The default delivery policy and the limits of one task.
std::optional<std::string> check_task_options(const dallyd_config& cfg,
                                              logic::engine_config& out) {
  auto& policy = out.shard.default_policy;
  policy.lease_ms = cfg.lease_ms;
  if (cfg.max_attempts > UINT32_MAX)
    return "--max-attempts is too large";
  policy.max_attempts = static_cast<uint32_t>(cfg.max_attempts);
  policy.backoff_initial_ms = cfg.backoff_initial_ms;
  policy.backoff_max_ms = cfg.backoff_max_ms;
  if (auto err = policy.validate())
    return "bad default delivery policy: " + err.message();
  out.shard.limits.max_payload_bytes = cfg.max_payload_bytes;
  if (cfg.max_topic_bytes < 1)
    return "--max-topic-bytes must be at least 1";
  out.shard.limits.max_topic_bytes = cfg.max_topic_bytes;
  return std::nullopt;
}

/// The notifiers and their caps.
std::optional<std::string> check_delivery_options(const dallyd_config& cfg,
                                                  logic::engine_config& out) {
  if (cfg.notifiers < 1 || cfg.notifiers > 1024)
    return "--notifiers must be in [1, 1024]";
  out.notifiers = static_cast<uint32_t>(cfg.notifiers);
  if (cfg.max_in_flight_per_consumer < 1 ||
      cfg.max_in_flight_per_consumer > UINT32_MAX)
    return "--max-in-flight-per-consumer must be in [1, 2^32)";
  out.max_in_flight_per_consumer =
    static_cast<uint32_t>(cfg.max_in_flight_per_consumer);
  if (cfg.default_max_batch < 1 || cfg.default_max_batch > 1024)
    return "--default-max-batch must be in [1, 1024]";
  out.default_max_batch = static_cast<uint32_t>(cfg.default_max_batch);
  if (cfg.max_in_flight_total < 1 || cfg.max_in_flight_total > UINT32_MAX)
    return "--max-in-flight-total must be in [1, 2^32)";
  out.max_in_flight_total = static_cast<uint32_t>(cfg.max_in_flight_total);
  if (cfg.max_queued_per_topic < 1 || cfg.max_queued_per_topic > UINT32_MAX)
    return "--max-queued-per-topic must be in [1, 2^32)";
  out.max_queued_per_topic = static_cast<uint32_t>(cfg.max_queued_per_topic);
  if (cfg.max_unanswered_per_topic > UINT32_MAX)
    return "--max-unanswered-per-topic must be in [0, 2^32)";
  out.max_unanswered_per_topic =
    static_cast<uint32_t>(cfg.max_unanswered_per_topic);
  out.max_pending_per_shard = cfg.max_pending_per_shard;
  return std::nullopt;
}

/// RocksDB's memory and the record cache.
std::optional<std::string> check_memory_options(const dallyd_config& cfg,
                                                logic::engine_config& out) {
  if (cfg.write_buffer_mb < 1 || cfg.write_buffer_mb > 65536)
    return "--write-buffer-mb must be in [1, 65536]";
  out.write_buffer_bytes = cfg.write_buffer_mb << 20;
  if (cfg.task_memtable == "btree")
    out.btree_task_memtable = true;
  else if (cfg.task_memtable == "skiplist")
    out.btree_task_memtable = false;
  else
    return "--task-memtable must be btree or skiplist, not '" +
           cfg.task_memtable + "'";
  if (cfg.block_cache_mb < 1 || cfg.block_cache_mb > 1 << 20)
    return "--block-cache-mb must be in [1, 1048576]";
  out.block_cache_bytes = cfg.block_cache_mb << 20;
  if (cfg.record_cache_mb > 1 << 20)
    return "--record-cache-mb must be in [0, 1048576]";
  out.shard.record_cache_bytes = cfg.record_cache_mb << 20;
  return std::nullopt;
}

/// Client connections (checked here, applied by the server).
std::optional<std::string> check_connection_options(const dallyd_config& cfg,
                                                    logic::engine_config&) {
  // A schedule request with one largest payload must always fit.
  if (cfg.max_message_bytes < cfg.max_payload_bytes + 65536 ||
      cfg.max_message_bytes > UINT32_MAX)
    return "--max-message-bytes must be in [max-payload-bytes + 65536, "
           "2^32)";
  if (cfg.max_connections < 1 || cfg.max_connections > 65536)
    return "--max-connections must be in [1, 65536]";
  if (cfg.idle_eviction_ms < 1 || cfg.idle_eviction_ms > 86'400'000)
    return "--idle-eviction-ms must be in [1, 86400000]";
  if (cfg.max_pending_connections < 1 || cfg.max_pending_connections > 65536)
    return "--max-pending-connections must be in [1, 65536]";
  if (cfg.handshake_timeout_ms < 100 || cfg.handshake_timeout_ms > 3'600'000)
    return "--handshake-timeout-ms must be in [100, 3600000]";
  if (cfg.idle_timeout_ms > 86'400'000)
    return "--idle-timeout-ms must be in [0, 86400000]";
  if (cfg.max_partial_bytes < cfg.max_message_bytes)
    return "--max-partial-bytes must be at least --max-message-bytes";
  return std::nullopt;
}

/// Checks the values and turns them into an engine config; an error text
/// on a bad value.
std::optional<std::string> to_engine_config(const dallyd_config& cfg,
                                            logic::engine_config& out) {
  for (auto check :
       {check_node_options, check_window_options, check_task_options,
        check_delivery_options, check_memory_options, check_connection_options})
    if (auto err = check(cfg, out))
      return err;
  return std::nullopt;
}

std::string summary(const dallyd_config& cfg) {
  return "data-dir=" + cfg.data_dir + " shards=" + std::to_string(cfg.shards) +
         " durability=" + cfg.durability +
         (cfg.durability == "periodic"
            ? " sync-period-ms=" + std::to_string(cfg.sync_period_ms)
            : std::string{}) +
         " window-ms=" + std::to_string(cfg.window_ms) +
         " max-in-memory=" + std::to_string(cfg.max_in_memory) +
         " overdue-rate=" + std::to_string(cfg.overdue_rate) +
         "/s lease-ms=" + std::to_string(cfg.lease_ms) +
         " max-attempts=" + std::to_string(cfg.max_attempts);
}

/// Asks the engine what it recovered and logs it.
void log_recovery(caf::actor_system& sys, const engine_actor& engine) {
  caf::scoped_actor self{sys};
  auto timeout = std::chrono::seconds{10};
  self->request(engine, timeout, net::stats_request{})
    .receive(
      [&](net::stats_reply& stats) {
        log_line("recovered: " + std::to_string(stats.pb.in_window()) +
                 " tasks in the in-memory window across " +
                 std::to_string(stats.pb.shards()) + " shards");
      },
      [&](caf::error& err) {
        log_line("stats after start failed: " + net::describe(err));
      });
  v1::DeadLettersRequest req;
  req.set_limit(1000);
  self->request(engine, timeout, net::make_wire(std::move(req)))
    .receive(
      [&](net::dead_letters_reply& page) {
        auto n = page.pb.dead_size();
        if (n == 0)
          return;
        log_line(std::to_string(n) + (page.pb.next_after_id() != 0 ? "+" : "") +
                 " dead letters (dallyctl dead-letters lists them)");
      },
      [&](caf::error& err) {
        log_line("dead-letter scan failed: " + net::describe(err));
      });
}

/// Logs what the node did since it started, before it stops.
void log_final_stats(caf::actor_system& sys, const engine_actor& engine) {
  caf::scoped_actor self{sys};
  self->request(engine, std::chrono::seconds{5}, net::stats_request{})
    .receive(
      [&](net::stats_reply& s) {
        log_line("since start: scheduled=" + std::to_string(s.pb.scheduled()) +
                 " fired=" + std::to_string(s.pb.fired()) +
                 " acked=" + std::to_string(s.pb.acked()) +
                 " nacked=" + std::to_string(s.pb.nacked()) +
                 " dead_lettered=" + std::to_string(s.pb.dead_lettered()) +
                 " in_window=" + std::to_string(s.pb.in_window()) +
                 " in_flight=" + std::to_string(s.pb.in_flight()));
      },
      [](caf::error&) {});
}

/// Whether `address` can only be reached from this host.
bool is_loopback(const std::string& address) {
  if (address == "localhost")
    return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, address.c_str(), &v4) == 1)
    return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return ::inet_pton(AF_INET6, address.c_str(), &v6) == 1 &&
         IN6_IS_ADDR_LOOPBACK(&v6);
}

/// Turns on TLS for the port if its files are given, or refuses to serve
/// other hosts without it; an error text for the user if not.
std::optional<std::string> set_up_tls(dallyd_config& cfg) {
  net::tls_files files{cfg.tls_cert, cfg.tls_key, cfg.tls_ca};
  if (files.cert.empty() && files.key.empty() && files.ca.empty()) {
    if (is_loopback(cfg.address) || cfg.insecure)
      return std::nullopt;
    return "--address " + cfg.address +
           " can be reached from other hosts, and without TLS anyone who "
           "reaches the port controls every task: give --tls-cert, "
           "--tls-key and --tls-ca, or --insecure to serve without TLS";
  }
  if (auto why = net::check_tls_files(files))
    return *why;
  net::enable_tls(cfg, files);
  return std::nullopt;
}

net::connection_limits connection_limits_of(const dallyd_config& cfg) {
  net::connection_limits out;
  out.max_connections = static_cast<uint32_t>(cfg.max_connections);
  out.max_pending = static_cast<uint32_t>(cfg.max_pending_connections);
  out.handshake_timeout_ms = static_cast<int64_t>(cfg.handshake_timeout_ms);
  out.idle_timeout_ms = static_cast<int64_t>(cfg.idle_timeout_ms);
  out.idle_eviction_ms = static_cast<int64_t>(cfg.idle_eviction_ms);
  out.max_partial_bytes = cfg.max_partial_bytes;
  return out;
}

/// The limits, TLS and logging of the engine's port, and of the cluster
/// port with `prefix` on its log lines.
net::publish_options publish_options_of(const dallyd_config& cfg,
                                        const std::string& prefix = "") {
  net::publish_options popts;
  popts.max_message_bytes = cfg.max_message_bytes;
  popts.on_refused = [prefix](const std::string& peer, uint64_t claimed_bytes) {
    log_line(prefix + "dropped the connection from " + peer +
             ": its next message claims " + std::to_string(claimed_bytes) +
             " bytes, above --max-message-bytes");
  };
  popts.limits = connection_limits_of(cfg);
  popts.tls = !cfg.tls_cert.empty();
  popts.on_closed = [prefix, limiter = std::make_shared<log_limiter>()](
                      const std::string& peer,
                      std::optional<net::close_reason> why) {
    limiter->log(why ? prefix + "closed the connection from " + peer + ": " +
                         net::to_string(*why)
                     : prefix + "refused a connection from " + peer +
                         ": --max-connections are open and none is idle");
  };
  return popts;
}

/// This node's own cluster address, where it listens for the others: its
/// seed's, or a learner's --cluster-listen; an error text if it has none
/// or both.
std::optional<std::string>
own_cluster_address(const dallyd_config& cfg,
                    const actors::cluster_node_config& c,
                    actors::cluster_seed& out) {
  auto self = std::find_if(c.seeds.begin(), c.seeds.end(),
                           [&](const auto& s) { return s.id == c.self; });
  if (self != c.seeds.end()) {
    if (!cfg.cluster_listen.empty())
      return "--cluster-listen is for a learner: node " +
             std::to_string(c.self) +
             " listens on its own address in --cluster-seeds";
    out = *self;
    return std::nullopt;
  }
  if (cfg.cluster_listen.empty())
    return "--node-id " + std::to_string(c.self) +
           " is not in --cluster-seeds: give --cluster-listen HOST:PORT to "
           "join as a learner";
  std::string err;
  auto spec =
    parse_cluster_seeds(std::to_string(c.self) + "@" + cfg.cluster_listen, err);
  if (!err.empty() || spec.size() != 1)
    return "--cluster-listen must be HOST:PORT: " + err;
  out = actors::cluster_seed{c.self, spec.front().host, spec.front().port};
  return std::nullopt;
}

/// The cluster node's settings, left empty for a single node (no cluster
/// option given); an error text on a bad value.
std::optional<std::string>
to_cluster_config(const dallyd_config& cfg,
                  std::optional<actors::cluster_node_config>& out) {
  if (cfg.cluster_seeds.empty() && cfg.node_id == 0)
    return std::nullopt;
  if (cfg.cluster_seeds.empty() || cfg.node_id == 0)
    return "--node-id and --cluster-seeds go together";
  std::string err;
  auto seeds = parse_cluster_seeds(cfg.cluster_seeds, err);
  if (!err.empty())
    return "--cluster-seeds: " + err;
  if (cfg.cluster_shards < 1 || cfg.cluster_shards > 65536)
    return "--cluster-shards must be in [1, 65536]";
  if (cfg.heartbeat_ms < 1 || cfg.unreachable_ms <= cfg.heartbeat_ms)
    return "--heartbeat-ms must be at least 1 and below --unreachable-ms";
  if (cfg.forward_timeout_ms < 100 || cfg.forward_timeout_ms > 3'600'000)
    return "--forward-timeout-ms must be in [100, 3600000]";
  actors::cluster_node_config c;
  c.self = static_cast<cluster::node_id>(cfg.node_id);
  for (auto& s : seeds)
    c.seeds.push_back(
      {static_cast<cluster::node_id>(s.id), std::move(s.host), s.port});
  if (c.self != cfg.node_id)
    return "--node-id is too large";
  actors::cluster_seed own;
  if (auto why = own_cluster_address(cfg, c, own))
    return why;
  c.address = own.host + ":" + std::to_string(own.port);
  c.tls = !cfg.tls_cert.empty() || !cfg.tls_key.empty() || !cfg.tls_ca.empty();
  if (!c.tls && !cfg.insecure && !is_loopback(own.host))
    return "the cluster address " + own.host +
           " can be reached from other hosts, and without TLS anyone who "
           "reaches it can join the cluster's Raft group: give --tls-cert, "
           "--tls-key and --tls-ca, or --insecure to link without TLS";
  c.shard_count = static_cast<uint32_t>(cfg.cluster_shards);
  c.log_dir = (std::filesystem::path{cfg.data_dir} / "cluster").string();
  c.heartbeat_ms = cfg.heartbeat_ms;
  c.unreachable_ms = cfg.unreachable_ms;
  c.random_seed = (uint64_t{std::random_device{}()} << 32) ^ c.self;
  c.on_event = [](const std::string& line) { log_line("cluster: " + line); };
  out = std::move(c);
  return std::nullopt;
}

/// Starts the cluster node and publishes it on this node's seed address,
/// with the engine port's limits and TLS.
caf::expected<std::pair<caf::actor, uint16_t>>
start_cluster(caf::actor_system& sys, const dallyd_config& cfg,
              actors::cluster_node_config ccfg) {
  actors::cluster_seed self;
  static_cast<void>(own_cluster_address(cfg, ccfg, self)); // checked before
  auto host = self.host;
  auto port = self.port;
  auto node = actors::spawn_cluster_node(sys, std::move(ccfg));
  if (!node)
    return std::move(node.error());
  (*node)->attach_functor([](const caf::error& reason) {
    log_line("cluster: the cluster node stopped: " + net::describe(reason));
  });
  auto bound = net::publish_actor(sys, *node, host, port,
                                  publish_options_of(cfg, "cluster: "));
  if (!bound) {
    caf::anon_send_exit(*node, caf::exit_reason::user_shutdown);
    return std::move(bound.error());
  }
  log_line("cluster: node " + std::to_string(self.id) + " listening on " +
           host + ":" + std::to_string(*bound) +
           (cfg.tls_cert.empty() ? ", without TLS" : ", TLS"));
  return std::make_pair(*node, *bound);
}

/// A cluster node's engine runs the shards the committed maps give it, out
/// of the cluster's shard count: the one its Raft log already knows, else
/// --cluster-shards; it forwards with --forward-timeout-ms. An error text
/// if the log cannot be read.
std::optional<std::string>
to_cluster_engine(const dallyd_config& cfg,
                  const actors::cluster_node_config& ccfg,
                  logic::engine_config& ecfg) {
  auto stored = actors::cluster_shard_count(ccfg.log_dir);
  if (!stored)
    return "cannot read the cluster log in " + ccfg.log_dir + ": " +
           net::describe(stored.error());
  ecfg.shard_count = *stored > 0 ? *stored : ccfg.shard_count;
  ecfg.node_id = ccfg.self;
  ecfg.open_all_shards = false;
  ecfg.forward_timeout_ms = cfg.forward_timeout_ms;
  log_line("cluster: node " + std::to_string(ccfg.self) + ", " +
           std::to_string(ecfg.shard_count) + " shards" +
           (*stored > 0 ? " (the cluster's)" : " (--cluster-shards)") +
           "; its engine opens the shards the committed map gives it");
  return std::nullopt;
}

/// Runs the node in `sys` until SIGINT or SIGTERM; the engine's stores are
/// closed when it returns.
int run_node(caf::actor_system& sys, dallyd_config& cfg,
             const logic::engine_config& ecfg,
             std::optional<actors::cluster_node_config> ccfg,
             const sigset_t& stop_signals) {
  log_line("scheduler: " + runtime::describe_scheduler(sys));
  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<net::front_door> door;
  if (cfg.max_front_door_backlog > 0)
    door = std::make_shared<net::front_door>(cfg.max_front_door_backlog);
  auto engine = actors::embedded_engine::start(sys, ecfg, door);
  if (!engine) {
    std::cerr << "dallyd: cannot start the engine on " << cfg.data_dir << ": "
              << net::describe(engine.error()) << "\n";
    return exit_start_failed;
  }
  auto start_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
  log_line("engine started in " + std::to_string(start_ms) + " ms");
  if (!ccfg) // a cluster node's engine opens its shards later
    log_recovery(sys, engine->handle());
  auto popts = publish_options_of(cfg);
  popts.door = door;
  auto port = net::publish_engine(sys, engine->handle(), cfg.address, cfg.port,
                                  std::move(popts));
  if (!port) {
    std::cerr << "dallyd: cannot listen on " << cfg.address << ":" << cfg.port
              << ": " << net::describe(port.error()) << "\n";
    engine->stop();
    return exit_start_failed;
  }
  std::optional<std::pair<caf::actor, uint16_t>> cluster;
  if (ccfg) {
    ccfg->engine = engine->handle();
    auto started = start_cluster(sys, cfg, std::move(*ccfg));
    if (!started) {
      std::cerr << "dallyd: cannot start the cluster node: "
                << net::describe(started.error()) << "\n";
      engine->stop();
      return exit_start_failed;
    }
    cluster = std::move(*started);
  }
  std::printf("dallyd listening on %s:%u\n", cfg.address.c_str(),
              static_cast<unsigned>(*port));
  std::fflush(stdout);
  log_line("listening on " + cfg.address + ":" + std::to_string(*port) +
           (cfg.tls_cert.empty() ? ", without TLS" : ", TLS"));
  int sig = 0;
  while (sigwait(&stop_signals, &sig) != 0) {
    // retry
  }
  log_line(std::string{"received "} + (sig == SIGTERM ? "SIGTERM" : "SIGINT") +
           ", shutting down");
  // No new connections; then the engine stops (shards flush and close
  // their stores) while the connections still up see their requests fail.
  static_cast<void>(sys.middleman().unpublish(engine->handle(), *port));
  if (cluster) {
    static_cast<void>(
      sys.middleman().unpublish(cluster->first, cluster->second));
    caf::anon_send_exit(cluster->first, caf::exit_reason::user_shutdown);
  }
  log_final_stats(sys, engine->handle());
  engine->stop();
  log_line("engine stopped, stores closed");
  return exit_ok;
}

/// How long the actor system may take to stop once the stores are closed.
constexpr auto teardown_limit = std::chrono::seconds{10};

/// Runs the node until SIGINT or SIGTERM; the actor system is gone when it
/// returns. Its teardown waits for every actor and connection without a
/// limit (CAF 0.17), and once hung past teardown_limit (seen on loaded
/// machines, cause not found) the process logs its threads and exits: the
/// stores are closed by then, so nothing acknowledged is at stake.
int serve(dallyd_config& cfg, const logic::engine_config& ecfg,
          std::optional<actors::cluster_node_config> ccfg,
          const sigset_t& stop_signals) {
  runtime::watchdog teardown;
  caf::actor_system sys{cfg};
  auto rc = run_node(sys, cfg, ecfg, std::move(ccfg), stop_signals);
  teardown.arm(teardown_limit, [rc] {
    log_line("shutdown: CAF's actor system did not stop within " +
             std::to_string(teardown_limit.count()) +
             " s; the stores are closed, exiting without it; threads: " +
             runtime::describe_threads());
    std::_Exit(rc);
  });
  return rc;
}

int run(int argc, char** argv) {
  // Signals are taken synchronously by sigwait in this thread; every thread
  // CAF starts inherits the mask, so no handler ever runs.
  // A shell starts background jobs with SIGINT ignored, and an ignored
  // signal never reaches sigwait: take both back.
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  dallyd_config cfg;
  runtime::configure(cfg, runtime::role::node);
  std::vector<std::string> args{argv + 1, argv + argc};
  for (const auto& arg : args) {
    if (arg == "-h" || arg == "--help" || arg == "-?") {
      print_help(cfg);
      return exit_ok;
    }
  }
  args = join_option_values(args, valued_option_names(cfg.options()));
  if (auto err = cfg.parse(std::move(args))) {
    std::cerr << "dallyd: " << caf::to_string(err) << "\ntry 'dallyd --help'\n";
    return exit_usage;
  }
  if (cfg.cli_helptext_printed)
    return exit_ok; // --long-help or --dump-config
  if (!cfg.remainder.empty()) {
    std::cerr << "dallyd: unexpected argument '" << cfg.remainder.front()
              << "'\ntry 'dallyd --help'\n";
    return exit_usage;
  }
  logic::engine_config ecfg;
  ecfg.log = log_line;
  if (auto msg = to_engine_config(cfg, ecfg)) {
    std::cerr << "dallyd: " << *msg << "\ntry 'dallyd --help'\n";
    return exit_usage;
  }
  std::optional<actors::cluster_node_config> ccfg;
  if (auto msg = to_cluster_config(cfg, ccfg)) {
    std::cerr << "dallyd: " << *msg << "\ntry 'dallyd --help'\n";
    return exit_usage;
  }
  if (auto msg = set_up_tls(cfg)) {
    std::cerr << "dallyd: " << *msg << "\n";
    return exit_usage;
  }
  log_line("starting: " + summary(cfg));
  log_line("heap: " + runtime::heap_description());
  // Under load freed pages stay for reuse (jemalloc_conf.cpp's decay);
  // once the node goes idle they go back to the OS at once.
  std::optional<runtime::heap_purger> purger;
  if (runtime::heap_purger::available()) {
    purger.emplace(runtime::heap_purger::options{});
    log_line("heap: freed pages go back to the OS within 250 ms of the "
             "process going idle (under 5% of a core)");
  }
  if (auto err = ccfg ? to_cluster_engine(cfg, *ccfg, ecfg) : std::nullopt) {
    std::cerr << "dallyd: " << *err << "\n";
    return exit_start_failed;
  }
  auto rc = serve(cfg, ecfg, std::move(ccfg), stop_signals);
  if (rc == exit_ok)
    log_line("stopped");
  return rc;
}

} // namespace

} // namespace dally::apps

int main(int argc, char** argv) {
  // Before any allocation of note: a long-running node should give back
  // the memory of a burst (see limit_retained_heap).
  dally::runtime::limit_retained_heap();
  return dally::apps::run(argc, argv);
}
