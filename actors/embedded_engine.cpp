#include "actors/embedded_engine.hpp"

#include <filesystem>
#include <system_error>

#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/engine.hpp"
#include "actors/messages.hpp"
#include "net/error.hpp"
#include "net/type_ids.hpp"

namespace dally::actors {

caf::expected<embedded_engine>
embedded_engine::start(caf::actor_system& sys, logic::engine_config cfg,
                       std::shared_ptr<net::front_door> door) {
  if (cfg.data_dir.empty())
    return net::make_caf_error(core::errc::invalid_request,
                               "data_dir is empty");
  if (cfg.shard_count == 0)
    return net::make_caf_error(core::errc::invalid_request,
                               "shard_count must be at least 1");
  std::error_code ec;
  std::filesystem::create_directories(cfg.data_dir, ec);
  if (ec)
    return net::make_caf_error(core::errc::io_error, "cannot create data dir " +
                                                       cfg.data_dir + ": " +
                                                       ec.message());
  auto handle = spawn_engine(sys, std::move(cfg), std::move(door));
  embedded_engine result{&sys, handle};
  caf::error failure;
  caf::scoped_actor self{sys};
  self
    ->request(caf::actor_cast<caf::actor>(handle), caf::infinite,
              ready_atom::value)
    .receive([](ready_atom) {}, [&](caf::error& err) { failure = err; });
  if (failure) {
    result.stop();
    return failure;
  }
  return result;
}

embedded_engine::embedded_engine(caf::actor_system* sys, engine_actor handle)
  : sys_(sys), handle_(std::move(handle)) {
  // nop
}

embedded_engine::~embedded_engine() {
  stop();
}

void embedded_engine::stop() {
  if (!handle_)
    return;
  caf::scoped_actor self{*sys_};
  self->monitor(handle_);
  self->send_exit(handle_, caf::exit_reason::user_shutdown);
  self->receive([](const caf::down_msg&) {});
  handle_ = nullptr;
  // The engine is gone; its linked helpers and shards follow it. Waiting
  // for them is the system's job (await_all_actors_done) or the next start
  // (a store still closing answers store_locked briefly).
}

} // namespace dally::actors
