#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "logic/delivery_box.hpp"
#include "logic/notifier_logic.hpp"
#include "logic/shard_driver.hpp"
#include "proto/dally_api.pb.h"

namespace dally::logic {

/// Payload bytes one batch message carries at most (a larger delivery goes
/// alone), so that a batch of big payloads stays a sane message.
inline constexpr size_t max_batch_payload_bytes = size_t{1} << 20;

/// How a notifier sends what its notifier_logic chose: one message per
/// delivery to a plain consumer (or one it does not know), at once; to a
/// batch consumer, its deliveries of this round in batches of up to its
/// `max_batch` and `max_batch_payload_bytes`, in the logic's order, after
/// the plain ones. `max_batch_of(cid)` is the consumer's max_batch (at most
/// 1: plain or unknown); `one(cid, box)` and `batch(cid, boxes)` send.
template<class MaxBatchOf, class One, class Batch>
void dispatch_sends(std::vector<std::pair<consumer_id, delivery_box>> sends,
                    MaxBatchOf max_batch_of, One one, Batch batch) {
  std::unordered_map<consumer_id, std::vector<delivery_box>> pending;
  std::vector<consumer_id> order;
  for (auto& [cid, d] : sends) {
    size_t max_batch = max_batch_of(cid);
    if (max_batch <= 1) {
      one(cid, std::move(d));
      continue;
    }
    auto [p, added] = pending.try_emplace(cid);
    if (added) {
      order.push_back(cid);
      p->second.reserve(std::min(sends.size(), max_batch));
    }
    p->second.push_back(std::move(d));
  }
  for (auto cid : order) {
    auto& items = pending[cid];
    size_t max_batch = max_batch_of(cid);
    std::vector<delivery_box> next;
    next.reserve(std::min(max_batch, items.size()));
    size_t bytes = 0;
    for (auto& d : items) {
      auto size = d->payload().size();
      if (!next.empty() && (next.size() == max_batch ||
                            bytes + size > max_batch_payload_bytes)) {
        batch(cid, std::move(next));
        next.clear();
        next.reserve(std::min(max_batch, items.size()));
        bytes = 0;
      }
      bytes += size;
      next.push_back(std::move(d));
    }
    if (next.size() == 1)
      one(cid, std::move(next.front()));
    else
      batch(cid, std::move(next));
  }
}

/// The verdict a consumer's answer gives on `ref`: an ack, or a nack with
/// its retry delay; nullopt for any other answer (the consumer settles
/// later through the engine, or the lease decides).
std::optional<verdict> verdict_of(const delivery_ref& ref,
                                  const v1::DeliveryReply& reply);

/// The verdicts of a batch consumer's answer on `refs`, in order; a
/// delivery without one (the answer stops short: VERDICT_LATER) is left to
/// its lease.
std::vector<verdict> verdicts_of(const std::vector<delivery_ref>& refs,
                                 const v1::DeliveryBatchReply& reply);

/// `verdicts` grouped by where each goes (`target_of(ref.id)`), the groups
/// in the order of their first verdict, so that each target gets one
/// message.
template<class Target, class TargetOf>
std::vector<std::pair<Target, std::vector<verdict>>>
group_verdicts(std::vector<verdict> verdicts, TargetOf target_of) {
  std::vector<std::pair<Target, std::vector<verdict>>> out;
  for (size_t k = 0; k < verdicts.size(); ++k) {
    const auto& target = target_of(verdicts[k].ref.id);
    auto j = std::find_if(out.begin(), out.end(),
                          [&](auto& p) { return p.first == target; });
    if (j == out.end()) {
      out.emplace_back(target, std::vector<verdict>{});
      j = std::prev(out.end());
      j->second.reserve(verdicts.size() - k);
    }
    j->second.push_back(std::move(verdicts[k]));
  }
  return out;
}

} // namespace dally::logic
