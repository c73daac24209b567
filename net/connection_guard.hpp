#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace dally::net {

/// Limits on the connections a published engine accepts.
struct connection_limits {
  /// Most connections open at once.
  uint32_t max_connections = 1024;

  /// Most connections open at once that have not yet done work (completed
  /// the handshake and sent a request). A new connection beyond it closes
  /// the oldest of them, so the other slots stay for connections that work.
  uint32_t max_pending = 128;

  /// Time a new connection has to complete its handshake and send its
  /// first request; closed after it. A connection that never sends
  /// anything is closed too.
  int64_t handshake_timeout_ms = 5000;

  /// A connection that has sent no request for this long is closed; 0:
  /// never. Heartbeats do not count.
  int64_t idle_timeout_ms = 0;

  /// At the connection cap, a new connection takes the place of one idle
  /// at least this long: the oldest that has done no work, else the one
  /// without a request for longest; otherwise the new one is refused.
  int64_t idle_eviction_ms = 10'000;

  /// Most bytes all connections together may hold in messages they have
  /// begun and not finished sending. A connection whose message would take
  /// more is closed.
  uint64_t max_partial_bytes = uint64_t{256} << 20;
};

/// Why a connection is closed.
enum class close_reason : uint8_t {
  /// It had done no work when a new connection came with `max_pending`
  /// open that had done none.
  pending_cap,
  /// A new connection needed the slot of one idle for `idle_eviction_ms`.
  evicted_idle,
  /// No handshake and request within `handshake_timeout_ms`.
  deadline,
  /// No request for `idle_timeout_ms`.
  idle_timeout,
  /// Its partial message would exceed `max_partial_bytes`.
  partial_budget,
};

/// Human-readable name of `x`, for the log.
const char* to_string(close_reason x);

/// A connection to close, and why.
struct closing {
  uint64_t conn;
  close_reason why;
};

/// What becomes of a new connection.
struct admission {
  /// False: close the new connection at once (every slot holds a
  /// connection that works and none is idle long enough).
  bool admitted = false;
  /// A connection to close to make room for the new one.
  std::optional<closing> evict;
};

/// The decisions about the connections of one listening socket, without
/// CAF: which to admit, which to close for a deadline or to make room,
/// and how many bytes of unfinished messages they may hold. The caller
/// names each connection with an id that grows with the order of accepts,
/// gives the time as `now_ms` of a steady clock, and carries out the
/// closings it is told of. A connection the guard closed is forgotten at
/// once; telling of it afterwards does nothing.
class connection_guard {
public:
  explicit connection_guard(connection_limits limits);

  /// A new connection `id`, accepted at `now_ms`.
  admission on_accept(uint64_t id, int64_t now_ms);

  /// `id` completed its handshake.
  void on_handshake(uint64_t id);

  /// `id` sent a request (a message to an actor); counts only after the
  /// handshake.
  void on_request(uint64_t id, int64_t now_ms);

  /// `id` needs `bytes` more to hold a message it is sending. False: that
  /// would exceed `max_partial_bytes`; the guard forgets `id`, to be
  /// closed.
  bool grow_partial(uint64_t id, uint64_t bytes);

  /// `id` holds no partial message any more.
  void release_partial(uint64_t id);

  /// `id` is closed.
  void on_close(uint64_t id);

  /// The connections past a deadline at `now_ms`, forgotten here.
  std::vector<closing> expired(int64_t now_ms);

  /// Connections open.
  size_t open() const { return conns_.size(); }

  /// Connections open that have not done work yet.
  size_t pending() const { return pending_; }

  /// Bytes of partial messages held by all connections.
  uint64_t partial_bytes() const { return partial_bytes_; }

  const connection_limits& limits() const { return limits_; }

private:
  struct conn {
    int64_t accepted_ms = 0;
    int64_t last_request_ms = 0;
    uint64_t partial_bytes = 0;
    bool handshaken = false;
    bool working = false;
  };

  using conn_map = std::map<uint64_t, conn>;

  std::optional<closing> make_room(int64_t now_ms);
  void forget(conn_map::iterator it);

  connection_limits limits_;
  conn_map conns_;
  size_t pending_ = 0;
  uint64_t partial_bytes_ = 0;
};

} // namespace dally::net
