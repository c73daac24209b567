#pragma once

#include <caf/actor_system_config.hpp>
#include <caf/fwd.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

namespace dally::actors {

/// Registers Dally's message types and its error category with `cfg`. Every
/// process that runs an engine or talks to one calls it before creating its
/// actor_system; a type missing here compiles and then fails at run time.
void add_message_types(caf::actor_system_config& cfg);

/// Lets CAF's idle scheduler workers block on their condition variable
/// right after their short spin. By default an idle worker first polls
/// 500 times with a 50 µs sleep in between: 25 ms in theory, a tenth of a
/// second and more on a virtual machine where every sleep overshoots, and
/// each sleep is a syscall and two context switches. A delay engine hands
/// its workers a little work every millisecond or so, so they never got
/// past that polling: a third of a core at 60 tasks a second, a sixth of
/// the CPU per task at 70k (docs/benchmarks.md). Work from outside the
/// scheduler (timers, the network) wakes a resting worker at once. A
/// message one actor sends another goes to the sending worker's own queue,
/// which wakes nobody: it waits until that worker is free or another one
/// steals it while spinning or at its relaxed poll (every 10 ms). Call it
/// before creating the actor_system: a value set afterwards, on the
/// command line or in a config file, wins.
void rest_idle_workers(caf::actor_system_config& cfg);

/// Makes the actor_system schedule with `prompt_stealing` instead of CAF's
/// work stealing, so that a job from outside the workers (a due timer, a
/// message from the network) goes to an idle worker or to the front of a
/// busy one, not to the back of a busy one (docs/benchmarks.md). The choice
/// is made when the system starts: with `scheduler.policy` set to `sharing`
/// or `testing`, CAF's own scheduler of that name runs instead.
void prompt_outside_jobs(caf::actor_system_config& cfg);

/// Which scheduler `sys` runs and with how many workers, for a start-up log
/// line: "prompt stealing, 4 workers", "CAF work sharing, 2 workers", ...
std::string describe_scheduler(caf::actor_system& sys);

/// The CPU slice dallyd asks for by default (`--cpu-slice-us`), and what
/// dallyctl, the example and the benchmarks use "as dallyd": the shortest
/// the kernel grants.
constexpr std::chrono::microseconds default_cpu_slice{100};

/// Asks the kernel to run every thread the actor_system starts (workers,
/// clock, the middleman's, detached actors) with a CPU slice of `slice`
/// instead of its default (1.4 ms on two cores). Linux's EEVDF scheduler
/// lets a woken thread with a shorter slice preempt a running one; with
/// the default, a due timer or the worker that releases it can wait most
/// of a slice for a core that another thread holds, a large part of a
/// loaded node's p99 lateness (docs/benchmarks.md). Each thread sets its
/// own slice as it starts (a CAF thread hook); the policy and nice value
/// stay. Kernels before 6.12 ignore the request. Call it before creating
/// the actor_system. The count returned grows by one for every thread
/// that got the slice.
std::shared_ptr<const std::atomic<size_t>>
shorten_cpu_slices(caf::actor_system_config& cfg,
                   std::chrono::microseconds slice);

/// The CPU slice the kernel runs the calling thread with; zero where it
/// keeps no slice per thread (before Linux 6.12).
std::chrono::nanoseconds cpu_slice_of_this_thread();

} // namespace dally::actors
