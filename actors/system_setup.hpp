#pragma once

#include <caf/actor_system_config.hpp>

namespace dally::actors {

/// Registers Dally's message types and its error category with `cfg`. Every
/// process that runs an engine or talks to one calls it before creating its
/// actor_system; a type missing here compiles and then fails at run time.
void add_message_types(caf::actor_system_config& cfg);

} // namespace dally::actors
