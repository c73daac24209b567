#include "actors/system_setup.hpp"

#include "actors/error.hpp"
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

} // namespace dally::actors
