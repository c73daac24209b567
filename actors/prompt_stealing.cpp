#include "actors/prompt_stealing.hpp"

#include <caf/actor_system.hpp>
#include <caf/scheduler/coordinator.hpp>

namespace dally::actors {

prompt_stealing::coordinator_data::coordinator_data(
  caf::scheduler::abstract_coordinator* parent)
  : super::coordinator_data(parent) {}

prompt_stealing::worker_data::worker_data(
  caf::scheduler::abstract_coordinator* parent)
  : super::worker_data(parent) {}

prompt_stealing::worker_data::worker_data(const worker_data& other)
  : super::worker_data(other) {}

bool prompt_stealing::wake_if_resting(worker_data& data) {
  std::unique_lock<std::mutex> guard{data.waitdata.lock};
  if (!data.waitdata.sleeping)
    return false;
  data.waitdata.cv.notify_one();
  return true;
}

worker_timer_fn worker_timer_of(caf::actor_system& sys) {
  using coordinator = caf::scheduler::coordinator<prompt_stealing>;
  auto* self = dynamic_cast<coordinator*>(&sys.scheduler());
  if (self == nullptr)
    return {};
  return [self](int64_t due_ns, caf::strong_actor_ptr receiver,
                caf::message content, caf::message_priority priority) {
    prompt_stealing::arm(self, due_ns, std::move(receiver), std::move(content),
                         priority);
  };
}

} // namespace dally::actors
