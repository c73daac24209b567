#pragma once

#include <optional>

#include <caf/actor_config.hpp>
#include <caf/event_based_actor.hpp>

namespace dally::net {

/// An actor with a `state`, in place of CAF's `stateful_actor`. CAF 0.17
/// destroys a stateful actor's state in `on_exit`, and its scheduler skips
/// `on_exit` for an actor still queued when the actor system stops, so that
/// state's memory is never freed. Here the state is destroyed on exit as
/// there (dropping handles that would keep the actor alive), and otherwise
/// with the actor.
template<class State, class Base = caf::event_based_actor>
class owning_actor : public Base {
public:
  explicit owning_actor(caf::actor_config& cfg)
    : Base(cfg), state(kept_.emplace()) {
    // nop
  }

  const char* name() const override { return State::name; }

  void on_exit() override { kept_.reset(); }

private:
  std::optional<State> kept_;

public:
  /// Valid until the actor exits, like `stateful_actor::state`.
  State& state;
};

} // namespace dally::net
