#pragma once

// The common interface of dally-peers-bench: one `peer` per system under
// test (Dally remote or embedded, Redis, beanstalkd), started fresh for each
// run, with producers that schedule batches of tasks and consumers that
// receive and ack them into a shared `delivery_log`.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace dally::bench::peers {

/// UTC wall clock in µs and ms: due times are UTC ms in every system.
int64_t wall_us();
int64_t wall_ms();

/// A failure of a peer (server did not start, a reply was wrong, a
/// connection dropped); the run of that system fails with its message.
class peer_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// One task as a producer hands it to a client: the driver sets `id` and
/// `delay_ms`, the client the due times. Lateness is measured against
/// `reference_us`, earliness against `due_ms`; both are the same instant
/// for a system that takes absolute due times (Dally, the Redis ZSET).
/// beanstalkd takes a delay in whole seconds, counted from when it reads
/// the put: its `due_ms` is the time the put was written plus the delay
/// rounded up to seconds (nothing may come before it), its `reference_us`
/// the time the put's reply arrived plus that delay. The server set the
/// deadline before it replied, so beanstalkd's lateness is understated by
/// what lies between (with -f 0 the put's fsync), never overstated by the
/// time the put queued behind the others of its pipeline.
struct task_slot {
  uint64_t id = 0;
  int64_t delay_ms = 0;
  int64_t due_ms = 0;
  int64_t reference_us = 0;
};

/// The payload of a task: "<id>:<due_ms>:" padded with '.' to
/// `payload_bytes`, so that a consumer of any system knows which task it
/// got and when it was due, and every Redis member is unique.
std::string encode_body(uint64_t id, int64_t due_ms, size_t payload_bytes);

/// The id and due time encoded by `encode_body`; false if `body` is not
/// one.
bool decode_body(std::string_view body, uint64_t& id, int64_t& due_ms);

/// What the consumers of one run saw, shared by all of them (thread-safe)
/// and read by the driver when the run is over.
class delivery_log {
public:
  explicit delivery_log(uint64_t tasks);

  delivery_log(const delivery_log&) = delete;
  delivery_log& operator=(const delivery_log&) = delete;

  uint64_t tasks() const noexcept { return tasks_; }

  /// A consumer received `body` at wall clock `recv_us`.
  void received(std::string_view body, int64_t recv_us);

  /// The server confirmed `n` acks (for Dally: the consumer answered them;
  /// the driver then waits for the engine's own count).
  void acked(uint64_t n) { acked_.fetch_add(n, std::memory_order_relaxed); }

  /// Distinct tasks received at least once.
  uint64_t unique() const noexcept {
    return unique_.load(std::memory_order_relaxed);
  }

  /// Deliveries, counting every redelivery.
  uint64_t deliveries() const noexcept {
    return deliveries_.load(std::memory_order_relaxed);
  }

  uint64_t acked() const noexcept {
    return acked_.load(std::memory_order_relaxed);
  }

  /// Bodies that were not made by encode_body or named an id out of range.
  uint64_t malformed() const noexcept {
    return malformed_.load(std::memory_order_relaxed);
  }

  /// Earliest receive time of task `id` in µs, 0 if never received.
  int64_t first_us(uint64_t id) const noexcept {
    return tasks_seen_[id].first_us.load(std::memory_order_relaxed);
  }

  /// The due time the body of task `id` carried (0 if never received).
  int64_t body_due_ms(uint64_t id) const noexcept {
    return tasks_seen_[id].body_due_ms.load(std::memory_order_relaxed);
  }

private:
  /// What was seen of one task, in one cache line: tasks arrive in due
  /// order, random against their ids, and three arrays cost the consumers
  /// three cache misses per delivery.
  struct alignas(32) task_seen {
    std::atomic<int64_t> first_us{0};
    std::atomic<int64_t> body_due_ms{0};
    std::atomic<uint32_t> count{0};
  };

  uint64_t tasks_;
  std::unique_ptr<task_seen[]> tasks_seen_;
  std::atomic<uint64_t> unique_{0};
  std::atomic<uint64_t> deliveries_{0};
  std::atomic<uint64_t> acked_{0};
  std::atomic<uint64_t> malformed_{0};
};

/// CPU and memory of whatever runs the system: its server process, or for
/// the embedded engine the driver's own process.
struct resource_usage {
  /// User plus system CPU seconds so far, all threads.
  double cpu_s = 0;
  /// VmRSS and VmHWM (peak RSS) in KiB.
  uint64_t rss_kib = 0;
  uint64_t hwm_kib = 0;
};

/// Schedules tasks on one connection of its own; one per producer thread.
class producer {
public:
  virtual ~producer() = default;

  /// Schedules every task of `tasks` (setting its `due_ms`) with as many
  /// requests in flight as the system allows on one connection, and returns
  /// once the server has acknowledged them all at its durability level.
  /// Throws peer_error on any failure.
  virtual void schedule(std::span<task_slot> tasks) = 0;
};

/// Consumers (threads or actors) receiving and acking into a delivery_log
/// until stopped.
class consumer_group {
public:
  virtual ~consumer_group() = default;

  /// Stops and joins every consumer; the first error one of them hit, or
  /// "" if none did.
  virtual std::string stop() = 0;

  /// The first error a consumer hit so far ("" if none), so that the
  /// driver does not wait for deliveries that cannot come.
  virtual std::string error() const = 0;
};

/// Consumers that are threads of the driver (the Redis and beanstalkd
/// clients): each runs under a guard that keeps the first error, and all
/// stop when `stop` is called. A derived class calls `stop` in its
/// destructor, before its members go.
class thread_consumer_group : public consumer_group {
public:
  std::string stop() override;

  std::string error() const override;

protected:
  /// Runs `f` on a thread of its own; an exception it throws becomes the
  /// group's error (the first one wins).
  template<class F>
  void spawn(F f) {
    threads_.emplace_back([this, f = std::move(f)]() mutable {
      try {
        f();
      } catch (const std::exception& e) {
        keep_error(e.what());
      }
    });
  }

  bool stopping() const noexcept { return stop_; }

private:
  void keep_error(const std::string& what);

  std::atomic<bool> stop_{false};
  mutable std::mutex mtx_;
  std::string error_;
  std::vector<std::thread> threads_;
};

/// How a system is set up for a run.
struct peer_options {
  /// "sync" or "periodic": each system's client starts its server with
  /// the setting that matches it.
  std::string durability = "sync";
  /// Dally's --sync-period-ms with periodic durability.
  int64_t sync_period_ms = 50;
  /// Deliveries a consumer takes per round trip (Redis: pipelined LMOVEs,
  /// beanstalkd: pipelined reserves, Dally: max_batch).
  uint32_t consumer_batch = 64;
  /// Tasks per schedule_batch request of a Dally producer.
  uint32_t dally_request_tasks = 1024;
  /// Most due members the Redis mover moves per script call.
  uint32_t redis_move_batch = 500;
  /// Payload size of every task.
  size_t payload_bytes = 64;
  /// Server binaries.
  std::string dallyd;
  std::string redis_server;
  std::string beanstalkd;
  /// Where the server's stdout/stderr go.
  std::filesystem::path log_path;
};

/// One system under test, started fresh by `start` on a new data
/// directory; the destructor stops it (SIGTERM, then SIGKILL) if `stop` was
/// not called.
class peer {
public:
  virtual ~peer() = default;

  /// Row label, e.g. "Redis" or "Dally (remote)".
  virtual std::string name() const = 0;

  /// What `usage` measures, for the report.
  virtual std::string usage_scope() const = 0;

  /// Starts the server (or engine) on the empty directory `dir` and waits
  /// until it serves requests. Throws peer_error.
  virtual void start(const std::filesystem::path& dir) = 0;

  /// A new producer with a connection of its own.
  virtual std::unique_ptr<producer> make_producer() = 0;

  /// Starts `count` consumers (and whatever the system needs to make due
  /// tasks available to them, such as the Redis mover) that record into
  /// `log` and ack every delivery at once.
  virtual std::unique_ptr<consumer_group>
  start_consumers(uint32_t count, delivery_log& log) = 0;

  /// Waits until the server has settled (durably acked) `n` deliveries;
  /// false at `deadline`. By default: until the consumers counted `n`
  /// confirmed acks.
  virtual bool wait_settled(uint64_t n, const delivery_log& log,
                            std::chrono::steady_clock::time_point deadline);

  virtual resource_usage usage() const = 0;

  /// Resets the peak RSS (VmHWM) before a run, where the measured process
  /// is not fresh (the embedded engine's); a no-op for servers. A note if
  /// that failed (then the peak is the process's whole life's), else "".
  virtual std::string reset_peak() { return ""; }

  /// Stops the server and waits for it; a note if it did not stop cleanly
  /// (had to be killed, exit code not 0), "" otherwise.
  virtual std::string stop() = 0;
};

/// The systems dally-peers-bench knows, by their --systems names:
/// "dally" (dallyd over CAF's middleman), "dally-embedded", "redis",
/// "beanstalkd".
std::unique_ptr<peer> make_peer(const std::string& system,
                                const peer_options& opts);

/// Which Dally a peer runs.
enum class dally_kind {
  /// One dallyd child process, reached over CAF's middleman.
  remote,
  /// An engine in the driver's own actor_system.
  embedded,
  /// Three dallyd cluster nodes on 127.0.0.1; producers and consumers
  /// spread over the nodes.
  cluster3,
};

std::unique_ptr<peer> make_dally_peer(const peer_options& opts,
                                      dally_kind kind);
std::unique_ptr<peer> make_redis_peer(const peer_options& opts);
std::unique_ptr<peer> make_beanstalkd_peer(const peer_options& opts);

} // namespace dally::bench::peers
