#include "net/connection_guard.hpp"

#include <utility>

namespace dally::net {

const char* to_string(close_reason x) {
  switch (x) {
    case close_reason::pending_cap:
      return "no request yet while --max-pending-connections others wait";
    case close_reason::evicted_idle:
      return "no request for --idle-eviction-ms, to make room at "
             "--max-connections";
    case close_reason::deadline:
      return "no handshake and request within --handshake-timeout-ms";
    case close_reason::idle_timeout:
      return "no request within --idle-timeout-ms";
    case close_reason::partial_budget:
      return "unfinished messages of all connections would exceed "
             "--max-partial-bytes";
  }
  return "?";
}

connection_guard::connection_guard(connection_limits limits) : limits_(limits) {
  // nop
}

admission connection_guard::on_accept(uint64_t id, int64_t now_ms) {
  admission result;
  if (pending_ >= limits_.max_pending ||
      conns_.size() >= limits_.max_connections) {
    result.evict = make_room(now_ms);
    if (!result.evict)
      return result;
  }
  conns_.emplace(id, conn{now_ms, now_ms, 0, false, false});
  ++pending_;
  result.admitted = true;
  return result;
}

/// At `max_pending`, closes the oldest connection that has done no work.
/// At `max_connections`, closes one that has been idle for
/// `idle_eviction_ms`: the oldest that has done no work, else the one
/// without a request for longest.
std::optional<closing> connection_guard::make_room(int64_t now_ms) {
  auto oldest_pending = conns_.begin();
  while (oldest_pending != conns_.end() && oldest_pending->second.working)
    ++oldest_pending;
  if (pending_ >= limits_.max_pending && oldest_pending != conns_.end()) {
    closing out{oldest_pending->first, close_reason::pending_cap};
    forget(oldest_pending);
    return out;
  }
  auto victim = oldest_pending;
  if (victim == conns_.end() ||
      now_ms - victim->second.accepted_ms < limits_.idle_eviction_ms) {
    victim = conns_.end();
    for (auto it = conns_.begin(); it != conns_.end(); ++it)
      if (it->second.working &&
          (victim == conns_.end() ||
           it->second.last_request_ms < victim->second.last_request_ms))
        victim = it;
    if (victim != conns_.end() &&
        now_ms - victim->second.last_request_ms < limits_.idle_eviction_ms)
      victim = conns_.end();
  }
  if (victim == conns_.end())
    return std::nullopt;
  closing out{victim->first, close_reason::evicted_idle};
  forget(victim);
  return out;
}

void connection_guard::on_handshake(uint64_t id) {
  if (auto it = conns_.find(id); it != conns_.end())
    it->second.handshaken = true;
}

void connection_guard::on_request(uint64_t id, int64_t now_ms) {
  auto it = conns_.find(id);
  if (it == conns_.end() || !it->second.handshaken)
    return;
  it->second.last_request_ms = now_ms;
  if (!it->second.working) {
    it->second.working = true;
    --pending_;
  }
}

bool connection_guard::grow_partial(uint64_t id, uint64_t bytes) {
  auto it = conns_.find(id);
  if (it == conns_.end())
    return false;
  if (bytes > limits_.max_partial_bytes - partial_bytes_) {
    forget(it);
    return false;
  }
  it->second.partial_bytes += bytes;
  partial_bytes_ += bytes;
  return true;
}

void connection_guard::release_partial(uint64_t id) {
  if (auto it = conns_.find(id); it != conns_.end()) {
    partial_bytes_ -= it->second.partial_bytes;
    it->second.partial_bytes = 0;
  }
}

void connection_guard::on_close(uint64_t id) {
  if (auto it = conns_.find(id); it != conns_.end())
    forget(it);
}

std::vector<closing> connection_guard::expired(int64_t now_ms) {
  std::vector<closing> out;
  for (auto it = conns_.begin(); it != conns_.end();) {
    auto& c = it->second;
    std::optional<close_reason> why;
    if (!c.working && now_ms - c.accepted_ms >= limits_.handshake_timeout_ms)
      why = close_reason::deadline;
    else if (c.working && limits_.idle_timeout_ms > 0 &&
             now_ms - c.last_request_ms >= limits_.idle_timeout_ms)
      why = close_reason::idle_timeout;
    if (!why) {
      ++it;
      continue;
    }
    out.push_back({it->first, *why});
    forget(it++);
  }
  return out;
}

void connection_guard::forget(conn_map::iterator it) {
  partial_bytes_ -= it->second.partial_bytes;
  if (!it->second.working)
    --pending_;
  conns_.erase(it);
}

} // namespace dally::net
