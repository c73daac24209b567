#include "sim/network_model.hpp"

#include <algorithm>

namespace dally::sim {

namespace {

constexpr uint64_t per_million = 1'000'000;

} // namespace

network_model::network_model(prng gen, link_faults defaults)
  : gen_(gen), defaults_(defaults) {
  // nop
}

void network_model::set_faults(link_id link, link_faults faults) {
  auto& st = links_[link];
  st.has_faults = true;
  st.faults = faults;
}

void network_model::partition(link_id link) {
  links_[link].cut = true;
}

void network_model::heal(link_id link) {
  if (auto i = links_.find(link); i != links_.end())
    i->second.cut = false;
}

void network_model::heal_all() {
  for (auto& [link, st] : links_) {
    st.cut = false;
    st.clogged_until_ms = 0;
  }
}

void network_model::clog(link_id link, int64_t until_ms) {
  auto& st = links_[link];
  st.clogged_until_ms = std::max(st.clogged_until_ms, until_ms);
}

bool network_model::partitioned(link_id link) const {
  auto i = links_.find(link);
  return i != links_.end() && i->second.cut;
}

std::vector<int64_t> network_model::send(link_id link, int64_t now_ms) {
  auto& st = links_[link];
  const auto& faults = st.has_faults ? st.faults : defaults_;
  std::vector<int64_t> out;
  // Every draw is made whatever the outcome, so that one link's state does
  // not shift the choices of everything after it.
  auto dropped = gen_.chance(faults.drop_per_million, per_million);
  auto duplicated = gen_.chance(faults.duplicate_per_million, per_million);
  auto delay_ms = gen_.between(std::max<int64_t>(0, faults.min_delay_ms),
                               std::max<int64_t>(0, faults.max_delay_ms));
  if (st.cut || dropped)
    return out;
  auto at =
    std::max({now_ms + delay_ms, st.clogged_until_ms, st.last_arrival_ms});
  out.push_back(at);
  if (duplicated)
    out.push_back(at);
  st.last_arrival_ms = at;
  return out;
}

} // namespace dally::sim
