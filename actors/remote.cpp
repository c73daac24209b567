#include "actors/remote.hpp"

#include <chrono>
#include <memory>
#include <utility>

#include <caf/function_view.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor_impl.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/doorman_impl.hpp>
#include <caf/io/network/scribe_impl.hpp>
#include <caf/timespan.hpp>

#include "actors/type_ids.hpp"

namespace dally::actors {

namespace {

namespace io = caf::io;
namespace net = caf::io::network;

using shared_options = std::shared_ptr<const publish_options>;

/// An accepted connection that refuses to read a message longer than the
/// cap. The BASP broker asks for a message's payload with configure_read
/// from inside its handler, which runs within consume(); the connection is
/// dropped right after that handler returns.
class capped_scribe final : public net::scribe_impl {
public:
  capped_scribe(net::default_multiplexer& mx, net::native_socket fd,
                shared_options opts)
    : net::scribe_impl(mx, fd), opts_(std::move(opts)) {
    // nop
  }

  void configure_read(io::receive_policy::config cfg) override {
    if (cfg.second > opts_->max_message_bytes) {
      claimed_bytes_ = cfg.second;
      // The stream sizes its buffer to this before the drop takes effect.
      net::scribe_impl::configure_read(io::receive_policy::at_most(1));
      return;
    }
    net::scribe_impl::configure_read(cfg);
  }

  bool consume(caf::execution_unit* ctx, const void* buf,
               size_t num_bytes) override {
    if (claimed_bytes_ > 0)
      return false;
    auto ok = net::scribe_impl::consume(ctx, buf, num_bytes);
    if (claimed_bytes_ == 0)
      return ok;
    if (opts_->on_refused)
      opts_->on_refused(addr() + ":" + std::to_string(port()), claimed_bytes_);
    // As if the read failed: the broker forgets the connection, the stream
    // stops reading and the socket closes with the last reference.
    io_failure(ctx, net::operation::read);
    return false;
  }

private:
  shared_options opts_;
  uint64_t claimed_bytes_ = 0;
};

/// The listening socket; it hands each accepted socket to a capped_scribe
/// where CAF's doorman would make a plain one.
class capped_doorman final : public net::doorman_impl {
public:
  capped_doorman(net::default_multiplexer& mx, net::native_socket fd,
                 shared_options opts)
    : net::doorman_impl(mx, fd), opts_(std::move(opts)) {
    // nop
  }

  bool new_connection() override {
    if (detached())
      return false;
    auto& mx = acceptor_.backend();
    auto fd = acceptor_.accepted_socket();
    static_cast<void>(net::keepalive(fd, true));
    auto sptr = caf::make_counted<capped_scribe>(mx, fd, opts_);
    auto hdl = sptr->hdl();
    parent()->add_scribe(std::move(sptr));
    return io::doorman::new_connection(&mx, hdl);
  }

private:
  shared_options opts_;
};

/// CAF's middleman actor, opening capped_doormen; it serves one publish
/// request and hands the doorman to the same BASP broker as CAF's own.
class capped_middleman final : public io::middleman_actor_impl {
public:
  capped_middleman(caf::actor_config& cfg, caf::actor basp, shared_options opts)
    : io::middleman_actor_impl(cfg, std::move(basp)), opts_(std::move(opts)) {
    // nop
  }

protected:
  caf::expected<io::doorman_ptr> open(uint16_t port, const char* addr,
                                      bool reuse) override {
    auto* mx =
      dynamic_cast<net::default_multiplexer*>(&system().middleman().backend());
    if (mx == nullptr)
      return caf::make_error(caf::sec::runtime_error,
                             "the network backend is not CAF's default");
    auto fd = net::new_tcp_acceptor_impl(port, addr, reuse);
    if (!fd)
      return std::move(fd.error());
    return io::doorman_ptr{caf::make_counted<capped_doorman>(*mx, *fd, opts_)};
  }

private:
  shared_options opts_;
};

} // namespace

void enable_network(caf::actor_system_config& cfg) {
  cfg.load<caf::io::middleman>();
  using namespace std::chrono;
  cfg.set("middleman.heartbeat-interval", caf::timespan{seconds{1}});
  cfg.set("middleman.connection-timeout", caf::timespan{seconds{5}});
}

caf::expected<uint16_t> publish_engine(caf::actor_system& sys,
                                       const engine_actor& engine,
                                       const std::string& address,
                                       uint16_t port, publish_options opts) {
  if (!engine)
    return caf::make_error(caf::sec::cannot_publish_invalid_actor);
  auto basp = sys.middleman().named_broker<io::basp_broker>(caf::atom("BASP"));
  auto mm = sys.spawn<capped_middleman, caf::hidden>(
    std::move(basp), std::make_shared<const publish_options>(std::move(opts)));
  caf::detail::type_list<engine_actor> tk;
  auto sigs = sys.message_types(tk);
  auto f = caf::make_function_view(mm);
  auto result = f(caf::publish_atom::value, port,
                  caf::actor_cast<caf::strong_actor_ptr>(engine),
                  std::move(sigs), address, true);
  caf::anon_send_exit(mm, caf::exit_reason::user_shutdown);
  return result;
}

caf::expected<engine_actor>
connect_engine(caf::actor_system& sys, const std::string& host, uint16_t port) {
  return sys.middleman().remote_actor<engine_actor>(host, port);
}

} // namespace dally::actors
