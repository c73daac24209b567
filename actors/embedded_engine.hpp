#pragma once

#include <memory>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "logic/engine_config.hpp"
#include "net/engine_actor.hpp"
#include "net/front_door.hpp"

namespace dally::actors {

/// Dally inside a CAF application: spawns an engine into the caller's
/// actor_system (whose config must have had `add_message_types` applied)
/// and waits until every shard has recovered from its store.
///
///     caf::actor_system_config cfg;
///     dally::runtime::add_message_types(cfg);
///     caf::actor_system sys{cfg};
///     auto engine = dally::actors::embedded_engine::start(sys, {...});
///     if (!engine) ... // engine.error(): store_locked, io_error, ...
///     send requests to engine->handle(); engine->stop() before exiting.
class embedded_engine {
public:
  /// Creates `cfg.data_dir` if needed and starts the engine. Errors: the
  /// first shard's (store_locked when another process has the data
  /// directory, store_unavailable for another shard count, io_error...),
  /// invalid_request for an unusable config. `door`: see spawn_engine.
  static caf::expected<embedded_engine>
  start(caf::actor_system& sys, logic::engine_config cfg,
        std::shared_ptr<net::front_door> door = nullptr);

  embedded_engine(embedded_engine&&) noexcept = default;
  embedded_engine& operator=(embedded_engine&&) noexcept = default;

  /// Stops the engine (see `stop`).
  ~embedded_engine();

  const engine_actor& handle() const noexcept { return handle_; }

  /// Stops the engine and waits until every shard has flushed and closed
  /// its store. Requests in flight fail; everything acknowledged stays.
  void stop();

private:
  embedded_engine(caf::actor_system* sys, engine_actor handle);

  caf::actor_system* sys_ = nullptr;
  engine_actor handle_;
};

} // namespace dally::actors
