#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/error.hpp"
#include "core/placement.hpp"
#include "core/timer_entry.hpp"
#include "proto/dally_api.pb.h"

namespace dally::logic {

/// Part of a schedule_batch for one shard: its tasks, and where each one's
/// result goes in the answer.
struct batch_part {
  uint32_t shard = 0;
  v1::ScheduleBatchRequest request;
  std::vector<int> positions;
};

/// Where the engine sends each request: tasks by the shard map (an id to
/// its shard; a new task with an idempotency key to its key's shard, so
/// that a retry lands where the first try did and gets the same id), other
/// new tasks round the shards in turn: every shard, or those set by
/// `set_turns` (the shards a node of a cluster runs, so that it hands out
/// ids only in its own shards).
class request_router {
public:
  explicit request_router(core::shard_map map);

  const core::shard_map& map() const noexcept { return map_; }

  uint32_t shard_count() const noexcept { return map_.shard_count(); }

  /// The shard that owns task `id`.
  uint32_t shard_of(core::task_id id) const noexcept {
    return map_.shard_of(id);
  }

  /// New tasks without a key go round `shards` from now on (none: every
  /// shard); indexes beyond the shard count are dropped.
  void set_turns(std::vector<uint32_t> shards);

  /// The shard of the new task `req`: its key's, or the next in turn.
  uint32_t shard_for(const v1::ScheduleRequest& req);

  /// The shard of a schedule_batch that goes whole (no task has a key):
  /// the next in turn, if `up(shard)` says it runs. Nullopt: the batch is
  /// split (`split`).
  template<class Up>
  std::optional<uint32_t> whole(const v1::ScheduleBatchRequest& req, Up up) {
    if (req.tasks_size() == 0 || has_key(req) || !up(current_turn()))
      return std::nullopt;
    return take_turn();
  }

  /// Splits a batch by shard, moving its tasks out: those without a key
  /// all to the next shard in turn, keyed ones to their key's; parts in
  /// shard order.
  std::vector<batch_part> split(v1::ScheduleBatchRequest& req);

private:
  static bool has_key(const v1::ScheduleBatchRequest& req);
  uint32_t current_turn() const noexcept;
  uint32_t take_turn();

  core::shard_map map_;
  /// The shards new tasks go round; empty: every shard.
  std::vector<uint32_t> turns_;
  /// Position in turns_ (or the shard, when turns_ is empty).
  uint32_t next_ = 0;
};

/// The answer to a split schedule_batch, put together as its parts come
/// back: each result at its task's place in the request.
class batch_answer {
public:
  /// An answer to a request of `tasks` tasks, split in `parts` parts.
  batch_answer(int tasks, size_t parts);

  /// A part's answer came: its results go to `positions`.
  void fill(const std::vector<int>& positions, v1::ScheduleBatchReply& part);

  /// A part failed as a whole: each of its tasks fails with `err`.
  void fail(const std::vector<int>& positions, const core::error& err);

  /// Whether every part has come back (or failed).
  bool complete() const noexcept { return parts_left_ == 0; }

  /// The answer, once complete.
  v1::ScheduleBatchReply take() { return std::move(reply_); }

private:
  v1::ScheduleBatchReply reply_;
  size_t parts_left_ = 0;
};

} // namespace dally::logic
