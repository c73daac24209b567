#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/placement.hpp"
#include "core/result.hpp"

namespace dally::logic {

/// What installing a new shard map asks of a node: the shards it must open
/// (it owns them now and did not before) and those it must close (it owned
/// them and does not any more), each in shard order.
struct map_change {
  std::vector<uint32_t> open;
  std::vector<uint32_t> close;

  friend bool operator==(const map_change&, const map_change&) = default;
};

/// The shards `self` owns in `map`, in order.
std::vector<uint32_t> shards_owned(const core::shard_map& map,
                                   core::node_id self);

/// What moving from `old` (none: the node ran no shard) to `next` asks of
/// node `self`.
map_change change_between(const std::optional<core::shard_map>& old,
                          const core::shard_map& next, core::node_id self);

/// Where a request for one shard goes.
struct route_decision {
  enum class kind : uint8_t {
    /// This node owns the shard: its shard actor answers.
    local,
    /// Node `owner` owns it and this node can reach its engine.
    forward,
    /// Nobody here can answer: `reason` says why (shard, owner, epoch).
    unavailable,
  };

  kind where = kind::unavailable;
  uint32_t shard = 0;
  core::node_id owner = 0;
  std::string reason;
};

/// Which shards one node runs, by the newest shard map it was given, and
/// where each request goes. A map of an older epoch than the installed one
/// is refused, so that a late message never undoes a newer decision; so is
/// another map at the same epoch (two maps of one epoch mean a bug above).
class shard_ownership {
public:
  /// Node `self` of a data set of `shard_count` shards. `own_all`: it
  /// starts with the single-node map (every shard its own, epoch 0), as a
  /// node outside a cluster; otherwise it runs nothing until a map comes.
  shard_ownership(core::node_id self, uint32_t shard_count, bool own_all);

  /// Installs `next`; the shards to open and close, or `stale_epoch` (an
  /// older epoch, or another map at the installed epoch) or
  /// `invalid_request` (another shard count), changing nothing.
  core::result<map_change> install(core::shard_map next);

  core::node_id self() const noexcept { return self_; }

  uint32_t shard_count() const noexcept { return shard_count_; }

  /// The installed map; none before the first.
  const std::optional<core::shard_map>& map() const noexcept { return map_; }

  /// Whether this node owns `shard` by the installed map.
  bool owns(uint32_t shard) const noexcept;

  /// The shards this node owns, in order.
  std::vector<uint32_t> owned() const;

  /// The nodes other than this one that own a shard.
  std::vector<core::node_id> other_owners() const;

  /// Where a request for `shard` goes. `reachable(node)` says whether this
  /// node holds a handle to node's engine. A `forwarded` request came from
  /// another node already and is never sent on (two nodes with different
  /// maps would otherwise pass it back and forth).
  template<class Reachable>
  route_decision route(uint32_t shard, bool forwarded,
                       Reachable reachable) const {
    if (owns(shard))
      return {route_decision::kind::local, shard, self_, {}};
    if (!map_ || shard >= shard_count_)
      return unavailable(shard, forwarded);
    auto owner = map_->owner_of(shard);
    if (!forwarded && reachable(owner))
      return {route_decision::kind::forward, shard, owner, {}};
    return unavailable(shard, forwarded);
  }

  /// Why `shard` cannot be served here (for an `unavailable` error).
  route_decision unavailable(uint32_t shard, bool forwarded) const;

private:
  core::node_id self_;
  uint32_t shard_count_;
  std::optional<core::shard_map> map_;
};

} // namespace dally::logic
