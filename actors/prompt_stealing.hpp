#pragma once

#include <caf/policy/work_stealing.hpp>
#include <caf/resumable.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>

#include <atomic>
#include <cstddef>
#include <mutex>

namespace dally::actors {

/// CAF's work stealing, except where a job from outside the workers goes: a
/// timer's message, a message from the network or from a thread that is no
/// worker. CAF appends such a job to the back of the next worker in turn,
/// busy or not, where it waits behind every job that worker's actors hand
/// each other, which go to the front, while another worker may be resting.
/// For a delay engine that job is usually a release that is due now. Here
/// it goes to a worker that is looking for work, woken if it rests; when
/// every worker is busy, to the front of one, to run when that worker's
/// current job ends.
class prompt_stealing : public caf::policy::work_stealing {
public:
  using super = caf::policy::work_stealing;

  struct worker_data : super::worker_data {
    explicit worker_data(caf::scheduler::abstract_coordinator* parent);
    worker_data(const worker_data& other);

    /// True while the worker is between jobs, looking for one.
    std::atomic<bool> idle{false};
  };

  template<class Coordinator>
  void central_enqueue(Coordinator* self, caf::resumable* job) {
    auto n = self->num_workers();
    auto first = d(self).next_worker++;
    for (size_t i = 0; i < n; ++i) {
      auto w = self->worker_by_id((first + i) % n);
      if (d(w).idle.load(std::memory_order_acquire)) {
        w->external_enqueue(job); // Appends, and wakes the worker if it rests.
        return;
      }
    }
    auto w = self->worker_by_id(first % n);
    d(w).queue.prepend(job);
    // The worker may have finished its job meanwhile and gone to rest.
    wake_if_resting(d(w));
  }

  template<class Worker>
  caf::resumable* dequeue(Worker* self) {
    d(self).idle.store(true, std::memory_order_release);
    auto job = super::dequeue(self);
    d(self).idle.store(false, std::memory_order_release);
    return job;
  }

private:
  static void wake_if_resting(worker_data& data);
};

} // namespace dally::actors
