#include "actors/system_setup.hpp"

#include <caf/actor_system.hpp>
#include <caf/defaults.hpp>
#include <caf/policy/work_sharing.hpp>
#include <caf/policy/work_stealing.hpp>
#include <caf/scheduler/coordinator.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include "actors/error.hpp"
#include "actors/prompt_stealing.hpp"
#include "actors/type_ids.hpp"
#include "core/errc.hpp"

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
