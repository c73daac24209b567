#include "runtime/setup.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/defaults.hpp>
#include <caf/message.hpp>

#include "core/errc.hpp"
#include "net/cluster_types.hpp"
#include "net/error.hpp"
#include "net/remote.hpp"
#include "net/type_ids.hpp"

namespace dally::runtime {

void add_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_types<caf::id_block::dally>();
  cfg.add_message_types<caf::id_block::dally_cluster>();
  cfg.add_error_category(net::error_category, [](uint8_t code, caf::atom_value,
                                                 const caf::message& ctx) {
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

void configure(caf::actor_system_config& cfg, role r) {
  add_message_types(cfg);
  if (r == role::node || r == role::client)
    net::enable_network(cfg);
}

std::string describe_scheduler(caf::actor_system& sys) {
  auto policy = caf::get_or(sys.config(), "scheduler.policy",
                            caf::defaults::scheduler::policy);
  auto n = caf::get_or(sys.config(), "scheduler.max-threads",
                       caf::defaults::scheduler::max_threads);
  return "CAF " + caf::to_string(policy) + ", " + std::to_string(n) +
         (n == 1 ? " worker" : " workers");
}

} // namespace dally::runtime
