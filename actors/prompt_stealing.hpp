#pragma once

#include <caf/actor_control_block.hpp>
#include <caf/message.hpp>
#include <caf/message_id.hpp>
#include <caf/policy/work_stealing.hpp>
#include <caf/resumable.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>

#include "actors/worker_timers.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

namespace dally::actors {

/// CAF's work stealing, except where a job from outside the workers goes,
/// and who delivers a release timer.
///
/// A job from outside (a timer's message, a message from the network or
/// from a thread that is no worker): CAF appends it to the back of the next
/// worker in turn, busy or not, where it waits behind every job that
/// worker's actors hand each other, which go to the front, while another
/// worker may be resting. For a delay engine that job is usually a release
/// that is due now. Here it goes to a worker that is looking for work,
/// woken if it rests; when every worker is busy, to the front of one, to
/// run when that worker's current job ends.
///
/// Timed messages armed through `arm` (the notifiers' releases) are
/// delivered by the workers themselves: one resting worker, the watcher,
/// sleeps until the earliest of them, and every worker checks them between
/// jobs (one with jobs queued leaves a due one to the watcher for 1 ms). A
/// release then waits for one thread to wake, the worker that runs it,
/// instead of CAF's timer thread and then a worker.
class prompt_stealing : public caf::policy::work_stealing {
public:
  using super = caf::policy::work_stealing;

  static constexpr size_t no_worker = std::numeric_limits<size_t>::max();

  struct coordinator_data : super::coordinator_data {
    explicit coordinator_data(caf::scheduler::abstract_coordinator* parent);

    worker_timers timers;
    /// The resting worker that sleeps until the earliest timer, if any.
    std::atomic<size_t> watcher{no_worker};
  };

  struct worker_data : super::worker_data {
    explicit worker_data(caf::scheduler::abstract_coordinator* parent);
    worker_data(const worker_data& other);

    /// True while the worker is between jobs, looking for one.
    std::atomic<bool> idle{false};
    /// While it watches the timers: when it wakes up at the latest.
    /// Guarded by `waitdata.lock`.
    int64_t wake_ns = worker_timers::never_ns;
  };

  /// Has a worker deliver `content` to `receiver` at `due_ns` on the steady
  /// clock. Callable from any thread.
  template<class Coordinator>
  static void arm(Coordinator* self, int64_t due_ns,
                  caf::strong_actor_ptr receiver, caf::message content,
                  caf::message_priority priority) {
    auto& cd = d(self);
    if (!cd.timers.push(due_ns, std::move(receiver), std::move(content),
                        priority))
      return; // Whoever watches already wakes up in time.
    auto w = cd.watcher.load(std::memory_order_seq_cst);
    if (w == no_worker) {
      // Every worker is busy and checks between jobs, or one rests and
      // becomes the watcher when woken.
      wake_one_resting(self, no_worker);
      return;
    }
    auto& wd = d(self->worker_by_id(w));
    std::unique_lock<std::mutex> guard{wd.waitdata.lock};
    if (wd.waitdata.sleeping && due_ns < wd.wake_ns)
      wd.waitdata.cv.notify_one();
  }

  template<class Coordinator>
  void central_enqueue(Coordinator* self, caf::resumable* job) {
    auto n = self->num_workers();
    auto first = d(self).next_worker++;
    auto watcher = d(self).watcher.load(std::memory_order_relaxed);
    // An idle worker other than the watcher, else the watcher.
    size_t idle_watcher = no_worker;
    for (size_t i = 0; i < n; ++i) {
      auto id = (first + i) % n;
      auto w = self->worker_by_id(id);
      if (!d(w).idle.load(std::memory_order_acquire))
        continue;
      if (id == watcher) {
        idle_watcher = id;
        continue;
      }
      w->external_enqueue(job); // Appends, and wakes the worker if it rests.
      return;
    }
    if (idle_watcher != no_worker) {
      self->worker_by_id(idle_watcher)->external_enqueue(job);
      return;
    }
    auto w = self->worker_by_id(first % n);
    d(w).queue.prepend(job);
    // The worker may have finished its job meanwhile and gone to rest.
    wake_if_resting(d(w));
  }

  template<class Worker>
  caf::resumable* dequeue(Worker* self) {
    auto& wd = d(self);
    wd.idle.store(true, std::memory_order_release);
    auto job = find_job(self);
    wd.idle.store(false, std::memory_order_release);
    stop_watching(self);
    return job;
  }

  /// Called once the workers have stopped: drops the timers left.
  template<class Coordinator, class UnaryFunction>
  void foreach_central_resumable(Coordinator* self, UnaryFunction) {
    d(self).timers.clear();
  }

private:
  /// Wakes the worker of `data` if it rests; returns whether it did.
  static bool wake_if_resting(worker_data& data);

  /// Wakes one resting worker other than `except`, if any.
  template<class Coordinator>
  static void wake_one_resting(Coordinator* self, size_t except) {
    for (size_t i = 0; i < self->num_workers(); ++i)
      if (i != except && wake_if_resting(d(self->worker_by_id(i))))
        return;
  }

  /// How late a timer may be before a worker with jobs queued delivers it
  /// although a resting worker watches. The watcher should: a release it
  /// runs goes beside that queue, not ahead of it, so the shards' jobs
  /// queued there do not wait for the release and what it hands on.
  static constexpr int64_t watcher_grace_ns = 1'000'000;

  /// Delivers the timed messages that are due, and at least `grace_ns`
  /// late, from worker `self`: a receiver that was idle goes to the front
  /// of this worker's queue.
  template<class Worker>
  static void fire_due(Worker* self, int64_t grace_ns) {
    auto& cd = d(self->parent());
    auto earliest = cd.timers.earliest_ns();
    if (earliest == worker_timers::never_ns)
      return;
    auto now = worker_timers::now_ns();
    if (earliest > now - grace_ns)
      return;
    std::vector<worker_timers::entry> due;
    cd.timers.take_due(now, due);
    for (auto& x : due)
      if (x.receiver)
        x.receiver->enqueue(nullptr, caf::make_message_id(x.priority),
                            std::move(x.content), self);
  }

  template<class Worker>
  caf::resumable* take_head_or_due(Worker* self) {
    auto& wd = d(self);
    bool watched =
      d(self->parent()).watcher.load(std::memory_order_relaxed) != no_worker;
    fire_due(self, watched && !wd.queue.empty() ? watcher_grace_ns : 0);
    return wd.queue.take_head();
  }

  /// CAF's three phases (polling, polling with sleeps, resting), with the
  /// timers checked at every step.
  template<class Worker>
  caf::resumable* find_job(Worker* self) {
    auto& strategies = d(self).strategies;
    for (size_t k = 0; k < 2; ++k) {
      auto& s = strategies[k];
      for (size_t i = 0; i < s.attempts; i += s.step_size) {
        if (auto job = take_head_or_due(self))
          return job;
        if (i % s.steal_interval == 0)
          if (auto job = try_steal(self))
            return job;
        if (s.sleep_duration.count() > 0)
          std::this_thread::sleep_for(s.sleep_duration);
      }
    }
    auto& relaxed = strategies[2];
    for (size_t i = 1;; ++i) {
      if (auto job = take_head_or_due(self))
        return job;
      rest(self, relaxed.sleep_duration);
      if (auto job = take_head_or_due(self))
        return job;
      if (i % relaxed.steal_interval == 0)
        if (auto job = try_steal(self))
          return job;
    }
  }

  /// Sleeps until a job arrives or `max_sleep` passes; the watcher (the
  /// first worker to rest while none watches) also wakes for the earliest
  /// timer.
  template<class Worker>
  static void rest(Worker* self, caf::timespan max_sleep) {
    auto& cd = d(self->parent());
    auto& wd = d(self);
    std::unique_lock<std::mutex> guard{wd.waitdata.lock};
    if (!wd.queue.empty())
      return;
    auto expected = no_worker;
    bool watching = cd.watcher.compare_exchange_strong(
                      expected, self->id(), std::memory_order_seq_cst) ||
                    expected == self->id();
    auto now = worker_timers::now_ns();
    auto until = now + max_sleep.count();
    if (watching) {
      until = std::min(until, cd.timers.earliest_ns());
      if (until <= now)
        return; // A timer is due already.
      wd.wake_ns = until;
    }
    wd.waitdata.sleeping = true;
    using std::chrono::steady_clock;
    auto deadline = steady_clock::time_point{
      std::chrono::duration_cast<steady_clock::duration>(
        std::chrono::nanoseconds{until})};
    wd.waitdata.cv.wait_until(guard, deadline, [&] {
      return !wd.queue.empty() ||
             (watching && cd.timers.earliest_ns() < wd.wake_ns);
    });
    wd.waitdata.sleeping = false;
    wd.wake_ns = worker_timers::never_ns;
  }

  /// A worker that found a job no longer watches; another resting worker
  /// takes over if a timer is pending.
  template<class Worker>
  static void stop_watching(Worker* self) {
    auto& cd = d(self->parent());
    if (cd.watcher.load(std::memory_order_relaxed) != self->id())
      return;
    cd.watcher.store(no_worker, std::memory_order_seq_cst);
    if (cd.timers.earliest_ns() != worker_timers::never_ns)
      wake_one_resting(self->parent(), self->id());
  }
};

/// Arms a timed message: due time on the steady clock in ns, receiver,
/// content, priority.
using worker_timer_fn = std::function<void(
  int64_t, caf::strong_actor_ptr, caf::message, caf::message_priority)>;

/// The workers' timers of `sys` if it schedules with `prompt_stealing`;
/// empty otherwise, where CAF's clock times messages (and virtual time
/// under the test coordinator stays in charge).
worker_timer_fn worker_timer_of(caf::actor_system& sys);

} // namespace dally::actors
