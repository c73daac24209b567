#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>

namespace dally::net {

/// The bound on requests that clients sent to an engine and the engine has
/// not taken yet: its mailbox, which CAF does not bound. A published engine
/// reads each client request off its socket and queues it for the engine
/// at once, so a producer that sends without waiting for answers would
/// make the node hold whatever it sends. With a front_door, the listener
/// counts each request it reads for the engine (`on_request`) and the
/// engine each it takes (`on_taken`); at `max_backlog` the door closes: a
/// connection that brings another request stops reading its socket, so
/// the kernel's buffers fill and the producer's sends block. Once the
/// engine has taken the backlog down to `resume_backlog` the door opens
/// again and those connections read on. Connections that bring no request
/// for the engine (consumers' answers) read on throughout, and the engine
/// takes its backlog without any socket being read, so a closed door
/// always opens again.
///
/// No CAF: the listener's thread calls `on_request` and `reopen`, the
/// engine's `on_taken`; the waker, called from `on_taken`, asks the
/// listener's thread to call `reopen`.
class front_door {
public:
  /// dallyd's bound unless told otherwise (--max-front-door-backlog): a
  /// few MiB of schedule batches, taken by the engine in well under a
  /// second, far from CAF's connection timeout of 5 s (a stopped
  /// connection sends no heartbeats the node reads).
  static constexpr uint64_t default_max_backlog = 1024;

  /// Closes at `max_backlog` requests waiting (at least 1); opens again at
  /// `resume_backlog` (below it; 0: half of `max_backlog`), or after
  /// `stall_ms` closed without the engine taking a request (see on_tick).
  explicit front_door(uint64_t max_backlog, uint64_t resume_backlog = 0,
                      int64_t stall_ms = 1000);

  front_door(const front_door&) = delete;
  front_door& operator=(const front_door&) = delete;

  /// Called at most once per closing, by `on_taken`, when the door may
  /// open again; it must make the listener call `reopen` soon, on its own
  /// thread. Set before the engine takes requests.
  void set_waker(std::function<void()> waker);

  /// The listener read a request for the engine. True: the door is closed;
  /// stop reading the connection it came from until `reopen` says so.
  bool on_request();

  /// The engine took a request that `on_request` counted; may call the
  /// waker.
  void on_taken();

  /// The listener, woken. True: the door is open again; resume reading
  /// every connection stopped by `on_request`. False: it stays closed (the
  /// waker comes again once the backlog is down).
  bool reopen();

  /// The listener, now and then (every 100 ms), at `now_ms` of a steady
  /// clock. True: the door has been closed for `stall_ms` and the engine
  /// took nothing meanwhile; the backlog counted is forgotten and the door
  /// opens (resume every stopped connection). A request the listener
  /// counted can fail to reach the engine (a payload CAF cannot decode is
  /// dropped after the read), and such a count must not keep the door shut.
  bool on_tick(int64_t now_ms);

  /// Whether connections that bring requests stop reading.
  bool closed() const { return closed_.load(); }

  /// Requests read and not yet taken.
  int64_t backlog() const { return backlog_.load(); }

  /// The highest `backlog` so far.
  int64_t peak_backlog() const { return peak_.load(); }

  /// How often the door closed.
  uint64_t closings() const { return closings_.load(); }

  /// How often on_tick forgot the backlog.
  uint64_t stalls() const { return stalls_.load(); }

  uint64_t max_backlog() const { return max_; }
  uint64_t resume_backlog() const { return resume_; }

private:
  const uint64_t max_;
  const uint64_t resume_;
  const int64_t stall_ms_;
  /// Signed: the engine may take a request before the listener counts it.
  std::atomic<int64_t> backlog_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<bool> closed_{false};
  std::atomic<bool> wake_sent_{false};
  std::atomic<uint64_t> closings_{0};
  std::atomic<uint64_t> stalls_{0};
  std::atomic<uint64_t> taken_{0};
  /// The listener's: `taken_` at the last tick, and when it last moved.
  uint64_t last_taken_ = 0;
  int64_t last_progress_ms_ = 0;
  std::mutex waker_mtx_;
  std::function<void()> waker_;
};

} // namespace dally::net
