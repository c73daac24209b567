#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/timer_entry.hpp"

namespace dally::core {

/// Names a node of a cluster; a single node is node 0.
using node_id = uint32_t;

/// FNV-1a of `bytes`: the same on every platform, in every process and in
/// the simulator, so that every node places a key alike.
uint64_t fnv1a(std::string_view bytes) noexcept;

/// The shard of `shard_count` that owns task `id`: ids are dealt out
/// round the shards, so that a shard hands out ids without asking anyone
/// (see `task_id_of`). 0 when `shard_count` is 0.
constexpr uint32_t shard_of(task_id id, uint32_t shard_count) noexcept {
  return shard_count == 0 ? 0 : static_cast<uint32_t>(id % shard_count);
}

/// The position of `id` among its shard's ids (its local id).
constexpr uint64_t local_id_of(task_id id, uint32_t shard_count) noexcept {
  return shard_count == 0 ? id : id / shard_count;
}

/// The task id with local id `local` of shard `shard`; nullopt when it does
/// not fit 64 bits (the shard's ids are used up).
constexpr std::optional<task_id> task_id_of(uint64_t local, uint32_t shard,
                                            uint32_t shard_count) noexcept {
  task_id id = 0;
  if (__builtin_mul_overflow(local, uint64_t{shard_count}, &id) ||
      __builtin_add_overflow(id, uint64_t{shard}, &id))
    return std::nullopt;
  return id;
}

/// The shard of a new task scheduled with idempotency key `key`: the same
/// for every retry, so that a retry finds the first try.
uint32_t shard_of_key(std::string_view key, uint32_t shard_count) noexcept;

/// Which of `notifiers` delivers the tasks of `topic`. 0 when there are
/// none.
size_t notifier_of(std::string_view topic, size_t notifiers) noexcept;

/// Which node owns which shard, and since when (the epoch). A single node
/// owns every shard at epoch 0; a cluster's coordinator changes the owners
/// and raises the epoch, and grows this type with each shard's replicas
/// and in-sync set.
struct shard_map {
  /// Where one shard lives.
  struct placement {
    node_id owner = 0;

    friend bool operator==(const placement&, const placement&) = default;
  };

  /// Raised by every change of placement: a node acts only on the newest
  /// map it knows and refuses an older one.
  uint64_t epoch = 0;
  /// By shard index; the size is the shard count, fixed for the life of
  /// the data.
  std::vector<placement> shards;

  /// `shard_count` shards, all on `owner`, at epoch 0.
  static shard_map single_node(uint32_t shard_count, node_id owner = 0);

  uint32_t shard_count() const noexcept {
    return static_cast<uint32_t>(shards.size());
  }

  /// The shard that owns task `id`.
  uint32_t shard_of(task_id id) const noexcept {
    return core::shard_of(id, shard_count());
  }

  /// The shard of a new task with idempotency key `key`.
  uint32_t shard_of_key(std::string_view key) const noexcept {
    return core::shard_of_key(key, shard_count());
  }

  /// The node that owns `shard`.
  node_id owner_of(uint32_t shard) const { return shards.at(shard).owner; }

  friend bool operator==(const shard_map&, const shard_map&) = default;
};

} // namespace dally::core
