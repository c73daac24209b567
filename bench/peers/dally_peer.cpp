// Dally through its public CAF interface: remote (a dallyd child process,
// reached with net::connect_engine, consumers subscribed through the
// remote handle) or embedded (actors::embedded_engine in the driver's own
// actor_system). Producers send schedule_batch requests from threads;
// consumers are batch consumer actors that ack every delivery in their
// answer.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "actors/embedded_engine.hpp"
#include "bench/peers/peer.hpp"
#include "bench/peers/process.hpp"
#include "logic/engine_config.hpp"
#include "net/engine_actor.hpp"
#include "net/error.hpp"
#include "net/remote.hpp"
#include "net/type_ids.hpp"
#include "net/wire.hpp"
#include "runtime/setup.hpp"

namespace dally::bench::peers {

namespace {

constexpr const char* topic = "peers";

/// How long a request may take before the run counts as failed.
constexpr auto request_timeout = std::chrono::seconds{60};

class dally_producer : public producer {
public:
  dally_producer(caf::actor_system& sys, engine_actor engine,
                 const peer_options& opts)
    : self_(sys), engine_(std::move(engine)),
      request_tasks_(std::max<uint32_t>(1, opts.dally_request_tasks)),
      payload_bytes_(opts.payload_bytes) {
    // nop
  }

  /// Requests of `request_tasks_` tasks each, all sent before the first
  /// reply is awaited.
  void schedule(std::span<task_slot> tasks) override {
    auto now = wall_ms();
    auto send = [this](v1::ScheduleBatchRequest req) {
      return self_->request(engine_, request_timeout,
                            net::make_wire(std::move(req)));
    };
    std::vector<decltype(send(v1::ScheduleBatchRequest{}))> handles;
    std::vector<size_t> sizes;
    for (size_t first = 0; first < tasks.size(); first += request_tasks_) {
      auto last = std::min(tasks.size(), first + request_tasks_);
      v1::ScheduleBatchRequest req;
      for (auto i = first; i < last; ++i) {
        auto& t = tasks[i];
        t.due_ms = now + t.delay_ms;
        t.reference_us = t.due_ms * 1000;
        auto* pb = req.add_tasks();
        pb->set_topic(topic);
        pb->set_payload(encode_body(t.id, t.due_ms, payload_bytes_));
        pb->mutable_when()->set_at_ms(t.due_ms);
      }
      handles.push_back(send(std::move(req)));
      sizes.push_back(last - first);
    }
    std::string failure;
    for (size_t k = 0; k < handles.size(); ++k) {
      handles[k].receive(
        [&](net::schedule_batch_reply& r) {
          if (static_cast<size_t>(r.pb.results_size()) != sizes[k]) {
            failure = "schedule_batch answered " +
                      std::to_string(r.pb.results_size()) + " results for " +
                      std::to_string(sizes[k]) + " tasks";
            return;
          }
          for (const auto& res : r.pb.results())
            if (!res.has_scheduled() && failure.empty())
              failure = "schedule failed: " + res.failure().message();
        },
        [&](caf::error& err) {
          if (failure.empty())
            failure = "schedule_batch failed: " + net::describe(err);
        });
    }
    if (!failure.empty())
      throw peer_error("dally: " + failure);
  }

private:
  caf::scoped_actor self_;
  engine_actor engine_;
  uint32_t request_tasks_;
  size_t payload_bytes_;
};

/// Records every delivery in the log and acks it in the answer.
batch_consumer_actor::behavior_type
recording_consumer(batch_consumer_actor::pointer, delivery_log* log) {
  auto ack = [] {
    v1::DeliveryReply reply;
    reply.set_verdict(v1::DeliveryReply::VERDICT_ACK);
    return reply;
  };
  return {
    [log, ack](net::delivery_msg& d) {
      log->received(d.pb.payload(), wall_us());
      log->acked(1);
      return net::delivery_reply{ack()};
    },
    [log, ack](net::delivery_batch_msg& batch) {
      auto now_us = wall_us();
      v1::DeliveryBatchReply reply;
      for (const auto& d : batch.pb.deliveries()) {
        log->received(d.payload(), now_us);
        *reply.add_replies() = ack();
      }
      log->acked(static_cast<uint64_t>(batch.pb.deliveries_size()));
      return net::delivery_batch_reply{std::move(reply)};
    },
  };
}

class dally_consumers : public consumer_group {
public:
  /// Consumer i subscribes at `engines[i % engines.size()]`.
  dally_consumers(caf::actor_system& sys,
                  const std::vector<engine_actor>& engines, uint32_t count,
                  uint32_t max_batch, delivery_log& log)
    : sys_(sys) {
    caf::scoped_actor self{sys};
    for (uint32_t i = 0; i < count; ++i) {
      const auto& engine = engines[i % engines.size()];
      auto consumer = sys.spawn(recording_consumer, &log);
      consumers_.push_back(caf::actor_cast<caf::actor>(consumer));
      v1::SubscribeRequest sub;
      sub.set_topic(topic);
      sub.set_max_batch(max_batch);
      std::string failure;
      self
        ->request(engine, request_timeout,
                  net::subscribe_request{std::move(sub)}, consumer)
        .receive([](net::empty_reply&) {},
                 [&](caf::error& err) { failure = net::describe(err); });
      if (!failure.empty()) {
        stop();
        throw peer_error("dally: subscribe failed: " + failure);
      }
    }
    // The topic's availability travels notifier -> engine -> shards; a task
    // fired before it arrives is parked and comes back later.
    std::this_thread::sleep_for(std::chrono::milliseconds{100});
  }

  ~dally_consumers() override { stop(); }

  std::string stop() override {
    if (consumers_.empty())
      return "";
    caf::scoped_actor self{sys_};
    for (auto& c : consumers_) {
      self->monitor(c);
      self->send_exit(c, caf::exit_reason::user_shutdown);
    }
    for (size_t i = 0; i < consumers_.size(); ++i)
      self->receive([](const caf::down_msg&) {});
    consumers_.clear();
    return "";
  }

  std::string error() const override { return ""; }

private:
  caf::actor_system& sys_;
  std::vector<caf::actor> consumers_;
};

/// An actor_system config as dallyd's: an embedded engine, or a client of
/// a remote one.
struct client_config : caf::actor_system_config {
  explicit client_config(bool network) {
    runtime::configure(*this, network ? runtime::role::client
                                      : runtime::role::embedded);
  }
};

/// A port on 127.0.0.1 that was free a moment ago, for a cluster seed.
uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    throw peer_error("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  auto* sa = reinterpret_cast<sockaddr*>(&addr);
  bool ok =
    ::bind(fd, sa, sizeof(addr)) == 0 && ::getsockname(fd, sa, &len) == 0;
  ::close(fd);
  if (!ok)
    throw peer_error("no free port on 127.0.0.1");
  return ntohs(addr.sin_port);
}

/// The seed list of a cluster of `nodes` nodes on 127.0.0.1.
std::string cluster_seeds(uint32_t nodes) {
  std::string seeds;
  for (uint32_t id = 1; id <= nodes; ++id)
    seeds += (seeds.empty() ? "" : ",") + std::to_string(id) +
             "@127.0.0.1:" + std::to_string(free_port());
  return seeds;
}

class dally_peer : public peer {
public:
  dally_peer(peer_options opts, dally_kind kind)
    : opts_(std::move(opts)), kind_(kind) {
    // nop
  }

  ~dally_peer() override { stop(); }

  std::string name() const override {
    switch (kind_) {
      case dally_kind::embedded:
        return "Dally (embedded)";
      case dally_kind::cluster3:
        return "Dally (3-node cluster)";
      default:
        return "Dally (remote)";
    }
  }

  std::string usage_scope() const override {
    switch (kind_) {
      case dally_kind::embedded:
        return "the driver's process: engine, producers and consumers";
      case dally_kind::cluster3:
        return "the three dallyd processes together";
      default:
        return "dallyd process";
    }
  }

  void start(const std::filesystem::path& dir) override {
    if (kind_ == dally_kind::embedded) {
      start_embedded(dir / "data");
      return;
    }
    auto nodes = kind_ == dally_kind::cluster3 ? 3u : 1u;
    auto seeds = nodes > 1 ? cluster_seeds(nodes) : std::string{};
    std::vector<uint16_t> ports;
    for (uint32_t id = 1; id <= nodes; ++id) {
      auto data =
        nodes > 1 ? dir / ("data-" + std::to_string(id)) : dir / "data";
      auto argv = dallyd_argv(data);
      if (nodes > 1)
        argv.insert(argv.end(), {"--node-id", std::to_string(id),
                                 "--cluster-seeds", seeds});
      servers_.emplace_back(
        std::make_unique<server_process>(argv, dir, opts_.log_path));
      ports.push_back(listening_port(*servers_.back()));
    }
    cfg_ = std::make_unique<client_config>(true);
    sys_ = std::make_unique<caf::actor_system>(*cfg_);
    for (auto port : ports) {
      auto engine = net::connect_engine(*sys_, "127.0.0.1", port);
      if (!engine) {
        auto what = net::describe(engine.error());
        stop();
        throw peer_error("dally: cannot connect to dallyd on port " +
                         std::to_string(port) + ": " + what);
      }
      handles_.push_back(std::move(*engine));
    }
    if (nodes > 1)
      wait_serving();
  }

  /// Producers take the nodes in turn.
  std::unique_ptr<producer> make_producer() override {
    auto& engine = handles_[next_producer_++ % handles_.size()];
    return std::make_unique<dally_producer>(*sys_, engine, opts_);
  }

  std::unique_ptr<consumer_group> start_consumers(uint32_t count,
                                                  delivery_log& log) override {
    acked_base_ = acked();
    return std::make_unique<dally_consumers>(*sys_, handles_, count,
                                             opts_.consumer_batch, log);
  }

  /// Until the engines' own stats count the acks: an ack is settled when
  /// the shard has committed it at the durability level, not when the
  /// consumer answered.
  bool wait_settled(uint64_t n, const delivery_log&,
                    steady_time deadline) override {
    for (;;) {
      if (acked() - acked_base_ >= n)
        return true;
      if (std::chrono::steady_clock::now() >= deadline)
        return false;
      std::this_thread::sleep_for(std::chrono::milliseconds{1});
    }
  }

  resource_usage usage() const override {
    if (kind_ == dally_kind::embedded)
      return self_usage();
    resource_usage sum;
    for (auto& server : servers_) {
      auto u = process_usage(server->pid());
      sum.cpu_s += u.cpu_s;
      sum.rss_kib += u.rss_kib;
      sum.hwm_kib += u.hwm_kib;
    }
    return sum;
  }

  std::string reset_peak() override {
    if (kind_ == dally_kind::embedded && !reset_self_peak())
      return "could not reset VmHWM (/proc/self/clear_refs): peak RSS is the "
             "driver's since it started";
    return "";
  }

  std::string stop() override {
    handles_.clear();
    if (engine_) {
      engine_->stop();
      engine_.reset();
    }
    // The client's connections close with its actor system, before the
    // nodes stop.
    sys_.reset();
    cfg_.reset();
    std::string note;
    for (auto& server : servers_) {
      auto n = server->stop(std::chrono::seconds{30});
      if (!n.empty())
        note += (note.empty() ? "" : "; ") + n;
    }
    servers_.clear();
    return note;
  }

private:
  void start_embedded(const std::filesystem::path& data) {
    cfg_ = std::make_unique<client_config>(false);
    sys_ = std::make_unique<caf::actor_system>(*cfg_);
    logic::engine_config ecfg;
    ecfg.data_dir = data.string();
    ecfg.durability = opts_.durability == "sync"
                        ? storage::durability::sync
                        : storage::durability::periodic;
    ecfg.sync_period_ms = opts_.sync_period_ms;
    auto started = actors::embedded_engine::start(*sys_, std::move(ecfg));
    if (!started)
      throw peer_error("dally: cannot start the embedded engine: " +
                       net::describe(started.error()));
    engine_.emplace(std::move(*started));
    handles_.push_back(engine_->handle());
  }

  std::vector<std::string> dallyd_argv(const std::filesystem::path& data) {
    return {opts_.dallyd, "--port", "0", "--address", "127.0.0.1", "--data-dir",
            data.string(), "--durability", opts_.durability,
            // With sync: the period of the writes nobody waits for.
            "--sync-period-ms", std::to_string(opts_.sync_period_ms)};
  }

  /// The client port `server` prints once it listens.
  uint16_t listening_port(server_process& server) {
    auto line = server.read_line(std::chrono::steady_clock::now() +
                                 std::chrono::seconds{60});
    const std::string prefix = "dallyd listening on 127.0.0.1:";
    if (!line || line->rfind(prefix, 0) != 0) {
      auto what = server.running()
                    ? "dallyd printed no listening line within 60 s"
                    : "dallyd ended (" + server.exit_description() + ")";
      auto log = server.log_tail();
      stop();
      throw peer_error(what + "; its log:\n" + log);
    }
    return static_cast<uint16_t>(std::stoi(line->substr(prefix.size())));
  }

  /// Until every node takes a schedule for its own shards, which it does
  /// once it holds a committed map; the probe tasks are revoked.
  void wait_serving() {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{60};
    caf::scoped_actor self{*sys_};
    for (auto& engine : handles_) {
      for (std::string failure = "no answer";;) {
        v1::ScheduleRequest req;
        req.set_topic("peers-probe");
        req.mutable_when()->set_at_ms(wall_ms() + 3'600'000);
        std::optional<uint64_t> id;
        self
          ->request(engine, std::chrono::seconds{5},
                    net::make_wire(std::move(req)))
          .receive([&](net::schedule_reply& r) { id = r.pb.id(); },
                   [&](caf::error& err) { failure = net::describe(err); });
        if (id) {
          v1::RevokeRequest rev;
          rev.set_id(*id);
          self->request(engine, request_timeout, net::make_wire(std::move(rev)))
            .receive([](net::change_reply&) {}, [](caf::error&) {});
          break;
        }
        if (std::chrono::steady_clock::now() >= deadline) {
          stop();
          throw peer_error("dally: the cluster did not serve within 60 s: " +
                           failure);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds{100});
      }
    }
  }

  uint64_t acked() {
    uint64_t sum = 0;
    for (auto& engine : handles_)
      sum += stats(engine).acked();
    return sum;
  }

  v1::StatsReply stats(const engine_actor& engine) {
    caf::scoped_actor self{*sys_};
    std::optional<v1::StatsReply> out;
    std::string failure;
    self->request(engine, request_timeout, net::stats_request{})
      .receive([&](net::stats_reply& r) { out = std::move(r.pb); },
               [&](caf::error& err) { failure = net::describe(err); });
    if (!out)
      throw peer_error("dally: stats failed: " + failure);
    return std::move(*out);
  }

  peer_options opts_;
  dally_kind kind_;
  std::unique_ptr<client_config> cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  std::optional<actors::embedded_engine> engine_;
  std::vector<std::unique_ptr<server_process>> servers_;
  std::vector<engine_actor> handles_;
  size_t next_producer_ = 0;
  uint64_t acked_base_ = 0;
};

} // namespace

std::unique_ptr<peer> make_dally_peer(const peer_options& opts,
                                      dally_kind kind) {
  return std::make_unique<dally_peer>(opts, kind);
}

} // namespace dally::bench::peers
