#include "logic/engine_routing.hpp"

#include <algorithm>
#include <map>
#include <utility>

namespace dally::logic {

request_router::request_router(core::shard_map map) : map_(std::move(map)) {
  // nop
}

void request_router::set_turns(std::vector<uint32_t> shards) {
  auto count = map_.shard_count();
  std::erase_if(shards, [count](uint32_t s) { return s >= count; });
  turns_ = std::move(shards);
  next_ = 0;
}

uint32_t request_router::current_turn() const noexcept {
  if (turns_.empty())
    return map_.shard_count() == 0 ? 0 : next_ % map_.shard_count();
  return turns_[next_ % turns_.size()];
}

uint32_t request_router::take_turn() {
  auto shard = current_turn();
  auto round =
    turns_.empty() ? map_.shard_count() : static_cast<uint32_t>(turns_.size());
  next_ = round == 0 ? 0 : (next_ + 1) % round;
  return shard;
}

bool request_router::has_key(const v1::ScheduleBatchRequest& req) {
  const auto& tasks = req.tasks();
  return std::any_of(tasks.begin(), tasks.end(), [](const auto& task) {
    return task.has_idempotency_key();
  });
}

uint32_t request_router::shard_for(const v1::ScheduleRequest& req) {
  if (req.has_idempotency_key())
    return map_.shard_of_key(req.idempotency_key());
  return take_turn();
}

std::vector<batch_part> request_router::split(v1::ScheduleBatchRequest& req) {
  std::map<uint32_t, batch_part> parts;
  uint32_t unkeyed = current_turn();
  bool used_unkeyed = false;
  for (int i = 0; i < req.tasks_size(); ++i) {
    auto& task = *req.mutable_tasks(i);
    uint32_t shard = unkeyed;
    if (task.has_idempotency_key())
      shard = map_.shard_of_key(task.idempotency_key());
    else
      used_unkeyed = true;
    auto& part = parts[shard];
    part.shard = shard;
    *part.request.add_tasks() = std::move(task);
    part.positions.push_back(i);
  }
  if (used_unkeyed)
    take_turn();
  std::vector<batch_part> out;
  out.reserve(parts.size());
  for (auto& [shard, part] : parts)
    out.push_back(std::move(part));
  return out;
}

batch_answer::batch_answer(int tasks, size_t parts) : parts_left_(parts) {
  for (int i = 0; i < tasks; ++i)
    reply_.add_results();
}

void batch_answer::fill(const std::vector<int>& positions,
                        v1::ScheduleBatchReply& part) {
  for (size_t k = 0;
       k < positions.size() && k < static_cast<size_t>(part.results_size());
       ++k)
    *reply_.mutable_results(positions[k]) =
      std::move(*part.mutable_results(static_cast<int>(k)));
  --parts_left_;
}

void batch_answer::fail(const std::vector<int>& positions,
                        const core::error& err) {
  for (auto pos : positions) {
    auto* f = reply_.mutable_results(pos)->mutable_failure();
    f->set_code(static_cast<uint32_t>(err.code()));
    f->set_message(err.message());
  }
  --parts_left_;
}

} // namespace dally::logic
