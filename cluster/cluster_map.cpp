#include "cluster/cluster_map.hpp"

#include <algorithm>

#include "cluster/placement.hpp"

namespace dally::cluster {

namespace {

template<class... Fs>
struct overload : Fs... {
  using Fs::operator()...;
};

template<class... Fs>
overload(Fs...) -> overload<Fs...>;

} // namespace

std::string to_string(const command& cmd) {
  return std::visit(
    overload{
      [](const noop&) { return std::string{"noop"}; },
      [](const add_node& c) {
        return "add " + std::to_string(c.node) +
               (c.address.empty() ? "" : " at " + c.address);
      },
      [](const remove_node& c) { return "remove " + std::to_string(c.node); },
      [](const reassign&) { return std::string{"reassign"}; },
      [](const create_map& c) {
        std::string out = "create " + std::to_string(c.shard_count) + " on ";
        for (size_t i = 0; i < c.nodes.size(); ++i)
          out += (i == 0 ? "" : ",") + std::to_string(c.nodes[i]);
        return out;
      }},
    cmd);
}

cluster_map cluster_map::create(uint32_t shard_count,
                                std::vector<node_id> nodes) {
  cluster_map out;
  out.epoch = 1;
  out.shards.resize(shard_count);
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  for (auto id : nodes)
    out.members.push_back({id, member::status::active, {}});
  auto owners = place_shards(shard_count, nodes);
  for (size_t s = 0; s < owners.size(); ++s)
    out.shards[s].owner = owners[s];
  return out;
}

const member* cluster_map::find(node_id id) const noexcept {
  auto i =
    std::lower_bound(members.begin(), members.end(), id,
                     [](const member& m, node_id x) { return m.id < x; });
  return i != members.end() && i->id == id ? &*i : nullptr;
}

std::vector<node_id> cluster_map::active_nodes() const {
  std::vector<node_id> out;
  for (const auto& m : members)
    if (m.state == member::status::active)
      out.push_back(m.id);
  return out;
}

core::shard_map cluster_map::to_core() const {
  core::shard_map out;
  out.epoch = epoch;
  for (const auto& s : shards)
    out.shards.push_back({s.owner});
  return out;
}

bool cluster_map::apply(const command& cmd) {
  auto before_members = members;
  auto before_shards = shards;
  auto find_mut = [this](node_id id) {
    return std::find_if(members.begin(), members.end(),
                        [id](const member& m) { return m.id == id; });
  };
  if (auto* add = std::get_if<add_node>(&cmd)) {
    if (auto m = find_mut(add->node); m != members.end()) {
      m->state = member::status::active;
      if (!add->address.empty())
        m->address = add->address;
    } else {
      members.insert(
        std::upper_bound(members.begin(), members.end(), add->node,
                         [](node_id x, const member& m) { return x < m.id; }),
        member{add->node, member::status::active, add->address});
    }
  } else if (auto* rm = std::get_if<remove_node>(&cmd)) {
    if (auto m = find_mut(rm->node); m != members.end())
      m->state = member::status::leaving;
  } else if (auto* cr = std::get_if<create_map>(&cmd)) {
    if (shards.empty() && cr->shard_count > 0 && !cr->nodes.empty()) {
      auto created = create(cr->shard_count, cr->nodes);
      shards = std::move(created.shards);
      members = std::move(created.members);
    }
  } else if (std::holds_alternative<reassign>(cmd)) {
    auto active = active_nodes();
    if (!active.empty()) {
      auto owners = place_shards(shard_count(), active);
      for (size_t s = 0; s < owners.size(); ++s)
        shards[s].owner = owners[s];
      std::erase_if(members, [](const member& m) {
        return m.state == member::status::leaving;
      });
    }
  }
  if (members == before_members && shards == before_shards)
    return false;
  ++epoch;
  return true;
}

} // namespace dally::cluster
