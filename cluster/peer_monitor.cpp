#include "cluster/peer_monitor.hpp"

#include <algorithm>

namespace dally::cluster {

using kind = peer_effect::kind;

peer_monitor::peer_monitor(peer_monitor_config cfg,
                           const std::vector<node_id>& peers)
  : cfg_(cfg) {
  for (auto id : peers)
    peers_[id] = peer_state{};
}

void peer_monitor::add_peer(node_id peer) {
  peers_.try_emplace(peer);
}

std::vector<peer_effect> peer_monitor::on_tick(int64_t now_ms) {
  std::vector<peer_effect> fx;
  for (auto& [id, p] : peers_)
    tick_peer(now_ms, id, p, fx);
  return fx;
}

void peer_monitor::tick_peer(int64_t now_ms, node_id id, peer_state& p,
                             std::vector<peer_effect>& fx) const {
  if (p.reachable && now_ms - p.last_heard_ms >= cfg_.unreachable_ms) {
    p.reachable = false;
    fx.push_back({kind::down, id});
  }
  switch (p.state) {
    case link::disconnected:
      if (now_ms >= p.due_ms) {
        p.state = link::connecting;
        p.due_ms = now_ms + cfg_.connect_timeout_ms;
        fx.push_back({kind::connect, id});
      }
      break;
    case link::connecting:
      if (now_ms >= p.due_ms)
        lose_link(now_ms, p);
      break;
    case link::connected:
      if (now_ms >= p.due_ms) {
        p.due_ms = now_ms + cfg_.heartbeat_ms;
        fx.push_back({kind::send_heartbeat, id});
      }
      break;
  }
}

void peer_monitor::lose_link(int64_t now_ms, peer_state& p) const {
  p.state = link::disconnected;
  p.backoff_ms = p.backoff_ms == 0
                   ? cfg_.reconnect_min_ms
                   : std::min(p.backoff_ms * 2, cfg_.reconnect_max_ms);
  p.due_ms = now_ms + p.backoff_ms;
}

std::vector<peer_effect> peer_monitor::on_connected(int64_t now_ms,
                                                    node_id peer) {
  std::vector<peer_effect> fx;
  auto i = peers_.find(peer);
  if (i == peers_.end())
    return fx;
  auto& p = i->second;
  p.state = link::connected;
  p.backoff_ms = 0;
  p.due_ms = now_ms + cfg_.heartbeat_ms;
  fx.push_back({kind::send_heartbeat, peer});
  return fx;
}

std::vector<peer_effect> peer_monitor::on_connect_failed(int64_t now_ms,
                                                         node_id peer) {
  std::vector<peer_effect> fx;
  auto i = peers_.find(peer);
  if (i != peers_.end() && i->second.state == link::connecting)
    lose_link(now_ms, i->second);
  return fx;
}

std::vector<peer_effect> peer_monitor::on_message(int64_t now_ms,
                                                  node_id peer) {
  std::vector<peer_effect> fx;
  auto i = peers_.find(peer);
  if (i == peers_.end())
    return fx;
  auto& p = i->second;
  p.last_heard_ms = now_ms;
  if (!p.reachable) {
    p.reachable = true;
    fx.push_back({kind::up, peer});
  }
  return fx;
}

std::vector<peer_effect> peer_monitor::on_disconnected(int64_t now_ms,
                                                       node_id peer) {
  std::vector<peer_effect> fx;
  auto i = peers_.find(peer);
  if (i == peers_.end())
    return fx;
  auto& p = i->second;
  if (p.reachable) {
    p.reachable = false;
    fx.push_back({kind::down, peer});
  }
  if (p.state != link::disconnected)
    lose_link(now_ms, p);
  return fx;
}

bool peer_monitor::reachable(node_id peer) const {
  auto i = peers_.find(peer);
  return i != peers_.end() && i->second.reachable;
}

std::vector<peer_status> peer_monitor::status() const {
  std::vector<peer_status> out;
  for (const auto& [id, p] : peers_)
    out.push_back(
      {id, p.reachable, p.state == link::connected, p.last_heard_ms});
  return out;
}

} // namespace dally::cluster
