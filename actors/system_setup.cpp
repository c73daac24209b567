#include "actors/system_setup.hpp"

#include <caf/actor_system.hpp>
#include <caf/defaults.hpp>
#include <caf/policy/work_sharing.hpp>
#include <caf/policy/work_stealing.hpp>
#include <caf/scheduler/coordinator.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/thread_hook.hpp>

#include "actors/error.hpp"
#include "actors/prompt_stealing.hpp"
#include "actors/type_ids.hpp"
#include "core/errc.hpp"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace dally::actors {

void add_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_types<caf::id_block::dally>();
  cfg.add_error_category(
    error_category, [](uint8_t code, caf::atom_value, const caf::message& ctx) {
      std::string text = "dally: ";
      text += core::to_string(static_cast<core::errc>(code));
      if (ctx.size() == 1 && ctx.match_element<std::string>(0)) {
        text += " (";
        text += ctx.get_as<std::string>(0);
        text += ")";
      }
      return text;
    });
}

void rest_idle_workers(caf::actor_system_config& cfg) {
  cfg.set("work-stealing.moderate-poll-attempts", size_t{0});
}

void prompt_outside_jobs(caf::actor_system_config& cfg) {
  cfg.module_factories.push_back(
    [](caf::actor_system& sys) -> caf::actor_system::module* {
      namespace sched = caf::scheduler;
      auto policy = caf::get_or(sys.config(), "scheduler.policy",
                                caf::defaults::scheduler::policy);
      if (policy == caf::atom("testing"))
        return new sched::test_coordinator(sys);
      if (policy == caf::atom("sharing"))
        return new sched::coordinator<caf::policy::work_sharing>(sys);
      return new sched::coordinator<prompt_stealing>(sys);
    });
}

namespace {

/// The kernel's `struct sched_attr` (its first version, 48 bytes, the ABI of
/// sched_setattr(2)). Declared here because <linux/sched/types.h> clashes
/// with glibc's <sched.h>, and glibc 2.36 has no wrapper.
struct sched_attr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  /// For SCHED_OTHER since Linux 6.12: the requested slice in ns.
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
};

/// The kernel's scheduling attributes of the calling thread, or false.
bool read_own_sched_attr(sched_attr& attr) {
  attr = sched_attr{};
  return syscall(SYS_sched_getattr, 0, &attr, sizeof(attr), 0) == 0;
}

/// Gives each thread the actor_system starts the CPU slice `slice_ns`,
/// from that thread, before it runs anything.
class slice_hook : public caf::thread_hook {
public:
  slice_hook(uint64_t slice_ns, std::shared_ptr<std::atomic<size_t>> count)
    : slice_ns_(slice_ns), count_(std::move(count)) {
    // nop
  }

  void init(caf::actor_system&) override {
    // nop
  }

  void thread_started() override {
    sched_attr attr;
    if (!read_own_sched_attr(attr))
      return;
    if (attr.sched_policy != SCHED_OTHER && attr.sched_policy != SCHED_BATCH)
      return;
    // Keeps the policy and the nice value; only the slice changes.
    attr.size = sizeof(attr);
    attr.sched_flags = 0;
    attr.sched_runtime = slice_ns_;
    if (syscall(SYS_sched_setattr, 0, &attr, 0) != 0)
      return;
    if (read_own_sched_attr(attr) && attr.sched_runtime == slice_ns_)
      count_->fetch_add(1, std::memory_order_relaxed);
  }

  void thread_terminates() override {
    // nop
  }

private:
  uint64_t slice_ns_;
  std::shared_ptr<std::atomic<size_t>> count_;
};

} // namespace

std::shared_ptr<const std::atomic<size_t>>
shorten_cpu_slices(caf::actor_system_config& cfg,
                   std::chrono::microseconds slice) {
  auto count = std::make_shared<std::atomic<size_t>>(0);
  auto slice_ns = static_cast<uint64_t>(
    std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count());
  cfg.add_thread_hook<slice_hook>(slice_ns, count);
  return count;
}

std::chrono::nanoseconds cpu_slice_of_this_thread() {
  sched_attr attr;
  if (!read_own_sched_attr(attr))
    return std::chrono::nanoseconds{0};
  return std::chrono::nanoseconds{static_cast<int64_t>(attr.sched_runtime)};
}

std::string describe_scheduler(caf::actor_system& sys) {
  namespace sched = caf::scheduler;
  auto* ptr = &sys.scheduler();
  std::string name;
  if (dynamic_cast<sched::coordinator<prompt_stealing>*>(ptr) != nullptr)
    name = "prompt stealing";
  else if (dynamic_cast<sched::coordinator<caf::policy::work_stealing>*>(ptr) !=
           nullptr)
    name = "CAF work stealing";
  else if (dynamic_cast<sched::coordinator<caf::policy::work_sharing>*>(ptr) !=
           nullptr)
    name = "CAF work sharing";
  else if (dynamic_cast<sched::test_coordinator*>(ptr) != nullptr)
    name = "CAF testing (deterministic)";
  else
    name = "unknown";
  auto n = ptr->num_workers();
  return name + ", " + std::to_string(n) + (n == 1 ? " worker" : " workers");
}

} // namespace dally::actors
