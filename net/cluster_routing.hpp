#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/placement.hpp"
#include "core/result.hpp"
#include "proto/dally_api.pb.h"

namespace dally::net {

/// A cluster client's picture of the cluster: the newest shard map it has
/// seen and the nodes it holds a live connection to. It picks the node for
/// each request: a task's shard owner when it can reach it (no hop through
/// another node), otherwise any live node, which forwards.
class cluster_routes {
public:
  /// Takes `map` if it is newer than the held one (or none is held);
  /// whether it did.
  bool learn(core::shard_map map);

  /// The newest map seen; none before the first.
  const std::optional<core::shard_map>& map() const noexcept { return map_; }

  void set_live(core::node_id node, bool live);

  bool live(core::node_id node) const { return live_.count(node) > 0; }

  bool any_live() const noexcept { return !live_.empty(); }

  /// A request about task `id`.
  std::optional<core::node_id> for_task(uint64_t id);

  /// A new task: its key's shard owner, or the next live node in turn.
  std::optional<core::node_id> for_schedule(const v1::ScheduleRequest& req);

  /// A batch: the owner of its tasks when all have keys of shards of one
  /// owner, otherwise the next live node (which splits it).
  std::optional<core::node_id> for_batch(const v1::ScheduleBatchRequest& req);

  /// The next live node in turn; none when no node is live.
  std::optional<core::node_id> any();

private:
  std::optional<core::node_id> owner_or_any(uint32_t shard);

  std::optional<core::shard_map> map_;
  std::set<core::node_id> live_;
  /// Turns of `any`.
  uint64_t next_ = 0;
};

/// What a failed request tells a client about retrying it.
enum class failure_kind : uint8_t {
  /// The node refused it without doing anything: a shard it does not own
  /// or whose owner it cannot reach (the error names the map epoch), no
  /// map yet, a shard opening or restarting, a stale epoch. Safe to retry
  /// once the map is refreshed.
  refused,
  /// The request may have been done: the connection dropped or a forwarded
  /// request went unanswered before the answer came. Retried only when
  /// doing it twice does no harm.
  maybe_done,
  /// The answer itself (invalid request, not found, ...): never retried.
  final,
};

/// Sorts a request's error (already translated by `from_caf`).
failure_kind classify(const core::error& err);

/// Whether a request of an idempotent kind (`idempotent`) that failed
/// with `kind` may be sent again.
constexpr bool may_retry(failure_kind kind, bool idempotent) noexcept {
  return kind == failure_kind::refused ||
         (kind == failure_kind::maybe_done && idempotent);
}

/// Whether a schedule may be repeated: with an idempotency key, a retry
/// finds the first try.
bool is_idempotent(const v1::ScheduleRequest& req);

/// Whether every task of a batch has an idempotency key.
bool is_idempotent(const v1::ScheduleBatchRequest& req);

/// The map a node reported, or `invalid_request` when its owners do not
/// match its shard count.
core::result<core::shard_map> map_of(const v1::ClusterMapReply& reply);

} // namespace dally::net
