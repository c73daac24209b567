#pragma once

#include <caf/fwd.hpp>

#include <cstdint>
#include <string>

namespace dally::runtime {

/// What a process does with its actor system, which decides how it is set up.
enum class role : uint8_t {
  /// Runs an engine and serves it to remote clients (dallyd).
  node,
  /// Talks to a remote node (dallyctl, remote consumers, load drivers).
  client,
  /// Runs an engine inside an application, without the network.
  embedded,
};

/// Prepares `cfg` for `r` before the actor_system is created from it:
/// registers Dally's message types and error category (a type missing there
/// compiles, then fails at run time) and, for a node or a client, loads
/// CAF's middleman with heartbeats and a connection timeout, so that a
/// silent peer is noticed. The scheduler is CAF's own, with its defaults;
/// a value set afterwards, on the command line or in a config file, wins.
void configure(caf::actor_system_config& cfg, role r);

/// Registers Dally's message types and error category only; `configure`
/// does this and more.
void add_message_types(caf::actor_system_config& cfg);

/// A line for the log: which scheduler policy runs, with how many workers.
std::string describe_scheduler(caf::actor_system& sys);

} // namespace dally::runtime
