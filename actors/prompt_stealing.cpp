#include "actors/prompt_stealing.hpp"

namespace dally::actors {

prompt_stealing::worker_data::worker_data(
  caf::scheduler::abstract_coordinator* parent)
  : super::worker_data(parent) {}

prompt_stealing::worker_data::worker_data(const worker_data& other)
  : super::worker_data(other) {}

void prompt_stealing::wake_if_resting(worker_data& data) {
  std::unique_lock<std::mutex> guard{data.waitdata.lock};
  if (data.waitdata.sleeping)
    data.waitdata.cv.notify_one();
}

} // namespace dally::actors
