#include "sim/simulation.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <utility>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/engine.hpp"
#include "actors/messages.hpp"
#include "cluster/raft_node.hpp"
#include "core/placement.hpp"
#include "net/engine_actor.hpp"
#include "net/error.hpp"
#include "net/type_ids.hpp"
#include "runtime/setup.hpp"
#include "sim/clock_model.hpp"
#include "sim/event_log.hpp"
#include "sim/network_model.hpp"
#include "sim/raft_history.hpp"
#include "storage/fault_fs.hpp"
#include "storage/record_damage.hpp"

namespace dally::sim {

namespace {

using send_atom = caf::atom_constant<caf::atom("simsend")>;
using timeout_atom = caf::atom_constant<caf::atom("simtmo")>;
using answer_atom = caf::atom_constant<caf::atom("simanswer")>;

/// 2023-11-14T22:13:20Z: true time at virtual time zero.
constexpr int64_t t0_ms = 1'700'000'000'000;

/// How long the liveness phase lasts. Everything due is delivered within
/// this bound after the heal: the last due time (at most a minute past the
/// fault phase, recurrences under a minute more), every attempt's lease
/// and backoff, and slack.
int64_t liveness_span_ms(const sim_params& p) {
  return 120'000 +
         static_cast<int64_t>(p.max_attempts) * (p.max_lease_ms + 5'000) +
         60'000;
}

/// How far the engine's wall clock may be from true time in a run: the
/// skew, every jump, and the drift over the whole run.
int64_t clock_error_bound_ms(const sim_params& p) {
  auto run_ms = p.fault_phase_ms + liveness_span_ms(p);
  auto drift = std::abs(p.clock_drift_ppm) * run_ms / 1'000'000 + 1;
  return p.max_skew_ms +
         static_cast<int64_t>(p.clock_jumps) * p.clock_jump_max_ms +
         (p.clock_drift_ppm != 0 ? drift : 0);
}

/// The network node of the engine; clients are 1 and up.
constexpr uint32_t engine_node = 0;

/// How long a client waits for an answer before it counts as unknown.
constexpr int64_t client_timeout_ms = 5'000;

/// How long a cluster node's engine waits for a forwarded request's answer
/// before it answers `unavailable`: before the client gives up.
constexpr int64_t forward_timeout_ms = 3'000;

/// How long after the heal a cluster has a coordinator and every node the
/// newest map, its engine running exactly its shards.
constexpr int64_t converge_within_ms = 30'000;

/// Schedules whose answer never came are retried with the same key this
/// often at most.
constexpr int retries = 3;

/// Events at true times (ms), in order; equal times in the order added.
using agenda = std::multimap<int64_t, std::function<void()>>;

struct sim_config : caf::actor_system_config {
  sim_config() {
    set("scheduler.policy", caf::atom("testing"));
    set("logger.verbosity", caf::atom("quiet"));
    runtime::add_message_types(*this);
  }
};

/// The run's shared state; actors reach it through a plain pointer (the
/// run outlives them all, and only one thread runs anything).
struct world {
  world(const sim_options& o, const sim_params& p, prng& root)
    : opts(o), params(p), sched_gen(root.fork()), work_gen(root.fork()),
      consumer_gen(root.fork()), fault_gen(root.fork()),
      net(root.fork(), link_faults{0, p.net_max_delay_ms, p.net_drop_ppm,
                                   p.net_duplicate_ppm}),
      damage_gen(root.fork()), time_gen(root.fork()),
      clock(p.max_skew_ms, p.clock_drift_ppm, t0_ms),
      checks(clock_error_bound_ms(p)), cluster_gen(root.fork()) {
    // nop
  }

  const sim_options& opts;
  sim_params params;
  prng sched_gen;
  prng work_gen;
  prng consumer_gen;
  prng fault_gen;
  network_model net;
  /// Forked after the others, so that runs without damage stay as they
  /// were before damage was modelled.
  prng damage_gen;
  prng time_gen;
  clock_model clock;
  oracle checks;
  event_log log{64};
  std::optional<violation> failure;
  /// Forked last: a run of one engine draws nothing from it.
  prng cluster_gen;

  /// One node of a cluster run: its engine, on its own file system, data
  /// directory and wall clock, and its Raft node on its own log store
  /// (which survives the node's crashes, as a synced log does).
  struct node_state {
    node_state(uint32_t i, const sim_params& p)
      : index(i), id(i + 1), clock(p.max_skew_ms, p.clock_drift_ppm, t0_ms) {
      // nop
    }
    uint32_t index;
    cluster::node_id id;
    std::shared_ptr<storage::fault_fs> fs;
    logic::engine_config cfg;
    engine_actor engine;
    clock_model clock;
    std::unique_ptr<cluster::memory_log_store> log;
    std::unique_ptr<cluster::raft_node> raft;
    /// The Raft node's monotonic clock: true time plus this.
    int64_t mono_offset_ms = 0;
    bool crash_pending = false;
    /// The newest map epoch handed to the running engine.
    uint64_t sent_epoch = 0;
    /// Maps for the running engine, in commit order: the first is with it
    /// until it answers.
    std::deque<core::shard_map> maps;
    /// The shards the running engine reported open (map_installed_msg).
    std::set<uint32_t> running;
    /// The term in which this node, leading, proposed the map's creation.
    uint64_t create_term = 0;
  };
  /// A cluster run's nodes (none in a run of one engine).
  std::deque<node_state> nodes;
  std::unique_ptr<raft_history> history;
  /// The run's agenda, for events a cluster run adds as it goes (Raft
  /// messages in flight, ticks, restarts).
  agenda* plan = nullptr;

  bool clustered() const { return params.nodes > 0; }

  caf::actor_system* sys = nullptr;
  caf::scheduler::test_coordinator* sched = nullptr;
  std::shared_ptr<storage::fault_fs> fs;
  logic::engine_config cfg;
  engine_actor engine;
  uint32_t restarts = 0;
  uint32_t damaged = 0;
  bool healed = false;
  /// The engine's wall clock at the heal.
  int64_t healed_wall_ms = 0;
  /// A power cut is armed: the disk dies at a coming write or sync, and
  /// the engine is cut down then (or when nothing is left to run).
  bool crash_pending = false;
  /// Failed writes and syncs the oracle has been told of.
  uint64_t disk_failures_seen = 0;

  struct consumer_slot {
    std::string topic;
    caf::actor handle;
    bool alive = false;
    /// The consumer actor's number (each actor its own, never reused).
    uint64_t number = 0;
    /// The node it subscribes at and acks and touches through (a cluster
    /// run's; 0 otherwise).
    uint32_t home = 0;
  };
  std::vector<consumer_slot> consumers;
  /// Numbers of the consumer actors still alive.
  std::set<uint64_t> live_consumers;
  uint64_t next_consumer = 0;
  /// Promises of deliveries a hanging consumer never answers.
  std::vector<caf::typed_response_promise<net::delivery_reply>> hung;
  std::vector<caf::typed_response_promise<net::delivery_batch_reply>>
    hung_batches;

  /// The ids clients learned (their schedule's answer arrived), which the
  /// workload revokes, reschedules and damages; and those damaged.
  std::set<uint64_t> client_known;
  std::set<uint64_t> damaged_ids;
  uint64_t next_key = 0;
  uint64_t acknowledged = 0;
  uint64_t steps = 0;

  int64_t true_ms() const {
    using namespace std::chrono;
    auto since = sched->clock().current_time.time_since_epoch();
    return t0_ms + duration_cast<milliseconds>(since).count();
  }

  void event(const std::string& text) {
    auto now = true_ms();
    log.add(now, text);
    if (opts.verbose)
      std::cout << now - t0_ms << ' ' << text << std::endl;
  }

  void fail(violation v) {
    if (failure)
      return;
    event("VIOLATION " + v.invariant + ": " + v.detail);
    failure = std::move(v);
  }

  void check(std::optional<violation> v) {
    if (v)
      fail(std::move(*v));
  }
};

/// An actor whose incoming messages the simulation sees as they are put in
/// its mailbox, before it reads them: a delivery, or an engine's answer,
/// leaves the engine at that moment, however long the mailbox waits.
class tapped_actor : public caf::event_based_actor {
public:
  using tap_fn = std::function<void(const caf::mailbox_element&)>;
  using init_fn = std::function<caf::behavior(caf::event_based_actor*)>;

  tapped_actor(caf::actor_config& cfg, tap_fn tap, init_fn init)
    : caf::event_based_actor(cfg), tap_(std::move(tap)),
      init_(std::move(init)) {
    // nop
  }

  void enqueue(caf::mailbox_element_ptr ptr, caf::execution_unit* eu) override {
    if (ptr != nullptr && tap_)
      tap_(*ptr);
    caf::event_based_actor::enqueue(std::move(ptr), eu);
  }

  caf::behavior make_behavior() override { return init_(this); }

private:
  tap_fn tap_;
  init_fn init_;
};

/// The engine of node `node` (a cluster run's index; 0 otherwise), or
/// null while it is down.
engine_actor engine_at(world& w, uint32_t node) {
  return w.clustered() ? w.nodes[node].engine : w.engine;
}

/// Node `node`'s end of the simulated network: 0 for the one engine, 10
/// and up for a cluster's nodes (clients are 1 to 4).
uint32_t net_id(const world& w, uint32_t node) {
  return w.clustered() ? 10 + node : engine_node;
}

/// The node a client's request goes to: any, in a cluster run.
uint32_t pick_node(world& w) {
  return w.clustered()
           ? static_cast<uint32_t>(w.cluster_gen.pick(w.nodes.size()))
           : 0;
}

/// The engine's answer in `el` if it is one: the reply, or nothing for an
/// error.
template<class Reply>
std::optional<std::optional<Reply>> answer_in(const caf::mailbox_element& el) {
  if (!el.mid.is_response())
    return std::nullopt;
  const auto& content = el.content();
  if (content.match_elements<Reply>())
    return std::optional<Reply>{content.get_as<Reply>(0)};
  return std::optional<Reply>{};
}

/// The error answer in `el`, for the log.
std::string error_text(const caf::mailbox_element& el) {
  const auto& content = el.content();
  if (!content.match_elements<caf::error>())
    return "not an error";
  return net::describe(content.get_as<caf::error>(0));
}

/// Whether `el` is an error answer of code `unavailable`.
bool unavailable_in(const caf::mailbox_element& el) {
  const auto& content = el.content();
  return el.mid.is_response() && content.match_elements<caf::error>() &&
         net::from_caf(content.get_as<caf::error>(0)).code() ==
           core::errc::unavailable;
}

// -- clients ------------------------------------------------------------------

/// What a client's call tells the simulation, each as it happens.
template<class Reply>
struct call_hooks {
  /// A copy of the request reached the engine (put in its mailbox).
  std::function<void()> arrived;
  /// The engine's answer to a copy left it (nothing: an error), before the
  /// network could drop it.
  std::function<void(const std::optional<Reply>&)> answered;
  /// What the client made of it, once: the first answer that crossed the
  /// network, or nothing when none came within client_timeout_ms (the
  /// request may or may not have taken effect).
  std::function<void(std::optional<Reply>)> done;
};

/// Sends `req` from client `node` to the engine of node `target` across the
/// simulated network (each way delayed, dropped or duplicated as the
/// network model says).
template<class Reply, class Request>
void call(world& w, uint32_t node, uint32_t target, Request req,
          call_hooks<Reply> hooks) {
  auto tap = [answered = hooks.answered](const caf::mailbox_element& el) {
    if (auto answer = answer_in<Reply>(el))
      answered(*answer);
  };
  auto init = [&w, node, target, req = std::move(req), arrived = hooks.arrived,
               done = hooks.done](caf::event_based_actor* self) {
    auto finished = std::make_shared<bool>(false);
    auto now = w.true_ms();
    for (auto at : w.net.send({node, net_id(w, target)}, now))
      self->delayed_send(self, std::chrono::milliseconds{at - now},
                         send_atom::value);
    self->delayed_send(self, std::chrono::milliseconds{client_timeout_ms},
                       timeout_atom::value);
    auto finish = [self, finished, done](std::optional<Reply> answer) {
      if (*finished)
        return;
      *finished = true;
      done(std::move(answer));
      self->quit();
    };
    return caf::behavior{
      [self, &w, node, target, req, arrived](send_atom) {
        auto engine = engine_at(w, target);
        if (!engine)
          return; // The engine is down: the request is lost.
        self->request(engine, caf::infinite, req)
          .then(
            [self, &w, node, target](Reply& reply) {
              auto now = w.true_ms();
              for (auto at : w.net.send({net_id(w, target), node}, now))
                self->delayed_send(self, std::chrono::milliseconds{at - now},
                                   answer_atom::value, reply);
            },
            [](caf::error&) {
              // In doubt (the engine died, or its disk failed): the
              // timeout reports it as unknown.
            });
        arrived();
      },
      [finish](answer_atom, Reply& reply) { finish(std::move(reply)); },
      [finish](timeout_atom) { finish(std::nullopt); },
    };
  };
  w.sys->spawn<tapped_actor>(std::move(tap), std::move(init));
}

// -- consumers ----------------------------------------------------------------

v1::DeliveryReply verdict(v1::DeliveryReply::Verdict v) {
  v1::DeliveryReply out;
  out.set_verdict(v);
  return out;
}

delivery_ref ref_of(const v1::DeliveryId& id) {
  return delivery_ref{id.task_id(), id.occurrence(), id.attempt()};
}

std::string describe(const delivery_ref& d) {
  return std::to_string(d.id) + "/" + std::to_string(d.occurrence) + "/" +
         std::to_string(d.attempt);
}

/// A delivery left the engine for consumer `number`: logged and checked.
void observe_sent(world& w, uint64_t number, const v1::Delivery& d) {
  delivery_sent sent;
  sent.ref = ref_of(d.id());
  sent.due_ms = d.due_ms();
  sent.topic = d.topic();
  sent.payload = d.payload();
  sent.true_ms = w.true_ms();
  sent.consumer = number;
  sent.consumer_alive = w.live_consumers.count(number) > 0;
  w.event("deliver " + describe(sent.ref) + " due " +
          std::to_string(sent.due_ms - t0_ms) + " to consumer " +
          std::to_string(number) + (sent.consumer_alive ? "" : " (dead)"));
  w.check(w.checks.sent(sent));
}

/// Tells the oracle of failed writes and syncs (injected, or refused by a
/// disk that lost power) since it last heard: a failed write or sync may
/// have lost a commit unseen (an in-doubt fire can come back from disk
/// with its attempt, an ack's answer is an error), and the shard restarts
/// from its store (or the engine, after a power cut).
uint64_t disk_failures(const storage::fault_fs& fs) {
  auto st = fs.stats();
  return st.injected_write_failures + st.injected_sync_failures +
         st.refused_inactive;
}

void notice_disk_failures(world& w) {
  uint64_t failures = 0;
  if (w.clustered())
    for (const auto& n : w.nodes)
      failures += disk_failures(*n.fs);
  else
    failures = disk_failures(*w.fs);
  if (failures == w.disk_failures_seen)
    return;
  w.disk_failures_seen = failures;
  w.checks.restart();
}

/// Tells the oracle how a consumer answered `d`, and logs it.
void tell(world& w, const delivery_ref& d, consumer_verdict v,
          std::optional<int64_t> retry_in_ms = std::nullopt) {
  static constexpr const char* names[] = {"ack", "nack", "later"};
  w.event("answer " + describe(d) + " " + names[static_cast<int>(v)] +
          (retry_in_ms ? " retry in " + std::to_string(*retry_in_ms) : ""));
  w.checks.answered(d, v, retry_in_ms);
}

/// Tells the oracle the verdicts of `reply` for the deliveries of `batch`
/// (those without a verdict are `later`).
void tell_batch(world& w, const std::vector<delivery_ref>& batch,
                const v1::DeliveryBatchReply& reply) {
  for (size_t k = 0; k < batch.size(); ++k) {
    if (k >= static_cast<size_t>(reply.replies_size())) {
      tell(w, batch[k], consumer_verdict::later);
      continue;
    }
    const auto& v = reply.replies(static_cast<int>(k));
    if (v.verdict() == v1::DeliveryReply::VERDICT_NACK)
      tell(w, batch[k], consumer_verdict::nack, v.retry_in_ms());
    else
      tell(w, batch[k], consumer_verdict::ack);
  }
}

/// What a consumer does with a delivery, or with a whole batch, in the
/// fault phase: one draw per message, and every answer an ack once healed.
enum class reaction { ack, nack, die, hang, dawdle, touch };

reaction react(world& w, caf::event_based_actor* self, size_t slot) {
  if (w.healed)
    return reaction::ack;
  auto draw = w.consumer_gen.below(1'000'000);
  auto& p = w.params;
  if (draw < p.crash_ppm) {
    auto& c = w.consumers[slot];
    w.event("consumer " + std::to_string(c.number) + " dies");
    c.alive = false;
    w.live_consumers.erase(c.number);
    w.checks.consumer_died(c.number);
    w.checks.disturbance();
    self->quit(caf::exit_reason::user_shutdown);
    return reaction::die;
  }
  draw -= p.crash_ppm;
  if (draw < p.hang_ppm) {
    w.event("consumer " + std::to_string(w.consumers[slot].number) + " hangs");
    return reaction::hang;
  }
  draw -= p.hang_ppm;
  if (draw < p.nack_ppm)
    return reaction::nack;
  draw -= p.nack_ppm;
  if (draw < p.slow_ppm)
    return reaction::dawdle;
  draw -= p.slow_ppm;
  if (draw < p.touch_ppm)
    return reaction::touch;
  return reaction::ack;
}

v1::DeliveryReply nack_verdict(world& w) {
  auto reply = verdict(v1::DeliveryReply::VERDICT_NACK);
  reply.set_retry_in_ms(w.consumer_gen.between(0, 2'000));
  return reply;
}

/// Answers `rp` with `reply` after up to twice the lease, possibly too
/// late; `answered` runs as the answer goes.
template<class Reply>
void answer_late(world& w, caf::typed_response_promise<Reply> rp, Reply reply,
                 std::function<void()> answered) {
  auto delay = w.consumer_gen.between(1, 2 * w.params.max_lease_ms);
  w.sys->spawn(
    [rp, delay, reply, answered](caf::event_based_actor* helper, int) mutable {
      helper->delayed_send(helper, std::chrono::milliseconds{delay},
                           answer_atom::value);
      return caf::behavior{[rp, reply, answered, helper](answer_atom) mutable {
        answered();
        rp.deliver(reply);
        helper->quit();
      }};
    },
    0);
}

/// Sends `req` (an ack or a touch) to the engine; `then` runs once it
/// succeeded, and on an error the actor quits.
template<class Request>
void settle_through_engine(caf::event_based_actor* self, world& w,
                           uint32_t node, Request req,
                           std::function<void()> then) {
  auto engine = engine_at(w, node);
  if (!engine) {
    self->quit();
    return;
  }
  self->request(engine, caf::infinite, std::move(req))
    .then(
      [then](net::empty_reply&) {
        if (then)
          then();
      },
      [self](caf::error&) { self->quit(); });
}

/// A consumer that works long on a delivery it answered `later`: it
/// touches the delivery through the engine (extending or shortening its
/// lease), then acks through the engine within the new lease or falls
/// silent, so that the lease it set runs out.
/// Checks the engine's answers to a touch, then to the ack that may follow
/// it (`acking` tells which is due), against what the touch asked for.
std::function<void(const caf::mailbox_element&)>
touch_answer_checks(world& w, delivery_ref ref, int64_t extend_ms,
                    std::shared_ptr<size_t> mark,
                    std::shared_ptr<bool> acking) {
  return [&w, ref, extend_ms, mark, acking](const caf::mailbox_element& el) {
    auto answer = answer_in<net::empty_reply>(el);
    if (!answer)
      return;
    // A write that failed in this step may be why.
    notice_disk_failures(w);
    auto ok = answer->has_value();
    auto outcome = std::string{ok ? "ok" : "failed"};
    if (w.clustered() && !ok)
      outcome += ": " + error_text(el);
    if (w.clustered() && unavailable_in(el)) {
      // Forwarded to an owner that is down or cut off: not a refusal, and
      // the request may or may not have been done.
      w.event((*acking ? "ack " : "touch ") + describe(ref) +
              " through the engine -> unavailable");
      return;
    }
    if (*acking) {
      w.event("ack " + describe(ref) + " through the engine -> " + outcome);
      w.check(w.checks.ack_answered(ref, ok));
      return;
    }
    w.event("touch " + describe(ref) + " by " + std::to_string(extend_ms) +
            " ms -> " + outcome);
    w.check(w.checks.touch_answered(ref, extend_ms, ok, *mark));
  };
}

void touch_later(world& w, uint32_t node, const v1::DeliveryId& id) {
  auto& g = w.consumer_gen;
  auto wait_ms = g.between(0, 100);
  auto extend_ms = g.between(100, 2 * w.params.max_lease_ms);
  bool then_ack = g.chance(1, 2);
  auto ack_after_ms = g.between(0, extend_ms);
  auto ref = ref_of(id);
  auto mark = std::make_shared<size_t>(0);
  // The touch's answer comes before the ack is sent.
  auto acking = std::make_shared<bool>(false);
  auto tap = touch_answer_checks(w, ref, extend_ms, mark, acking);
  auto init = [&w, node, id, ref, mark, acking, wait_ms, extend_ms, then_ack,
               ack_after_ms](caf::event_based_actor* self) {
    self->delayed_send(self, std::chrono::milliseconds{wait_ms},
                       send_atom::value);
    return caf::behavior{
      [self, &w, node, id, mark, extend_ms, then_ack, ack_after_ms](send_atom) {
        v1::TouchRequest touch;
        *touch.mutable_id() = id;
        touch.set_extend_ms(extend_ms);
        *mark = w.checks.reading_mark();
        // Forwarded to the owner, it may be done there while its answer
        // is late or lost.
        if (w.clustered())
          w.checks.touch_may_apply(ref_of(id), extend_ms, *mark);
        settle_through_engine(self, w, node, net::touch_request{touch}, [=] {
          if (!then_ack) {
            self->quit();
            return;
          }
          self->delayed_send(self, std::chrono::milliseconds{ack_after_ms},
                             answer_atom::value);
        });
      },
      [self, &w, node, id, ref, acking](answer_atom) {
        *acking = true;
        tell(w, ref, consumer_verdict::ack);
        v1::AckRequest ack;
        *ack.mutable_id() = id;
        settle_through_engine(self, w, node, net::ack_request{ack},
                              [self] { self->quit(); });
      },
    };
  };
  w.sys->spawn<tapped_actor>(std::move(tap), std::move(init));
}

caf::result<net::delivery_reply> on_delivery(caf::event_based_actor* self,
                                             world& w, size_t slot,
                                             const v1::Delivery& d) {
  auto ref = ref_of(d.id());
  auto ack = net::delivery_reply{verdict(v1::DeliveryReply::VERDICT_ACK)};
  switch (react(w, self, slot)) {
    case reaction::ack:
      tell(w, ref, consumer_verdict::ack);
      return ack;
    case reaction::nack: {
      auto reply = nack_verdict(w);
      tell(w, ref, consumer_verdict::nack, reply.retry_in_ms());
      return net::delivery_reply{std::move(reply)};
    }
    case reaction::die:
      break; // Its promise below goes unanswered, as a dead actor's.
    case reaction::hang:
      w.hung.push_back(self->make_response_promise<net::delivery_reply>());
      return w.hung.back();
    case reaction::dawdle: {
      auto rp = self->make_response_promise<net::delivery_reply>();
      answer_late(w, rp, std::move(ack),
                  [&w, ref] { tell(w, ref, consumer_verdict::ack); });
      return rp;
    }
    case reaction::touch:
      tell(w, ref, consumer_verdict::later);
      touch_later(w, w.consumers[slot].home, d.id());
      return net::delivery_reply{verdict(v1::DeliveryReply::VERDICT_LATER)};
  }
  return self->make_response_promise<net::delivery_reply>();
}

/// As a batch consumer (params.max_batch > 1): one reaction per batch for
/// dying, hanging, dawdling and touching; otherwise each delivery gets its
/// own verdict, and now and then the list stops short, which leaves the
/// rest to their leases (VERDICT_LATER).
caf::result<net::delivery_batch_reply>
on_batch(caf::event_based_actor* self, world& w, size_t slot,
         const v1::DeliveryBatch& batch) {
  std::vector<delivery_ref> refs;
  for (const auto& d : batch.deliveries())
    refs.push_back(ref_of(d.id()));
  auto how = react(w, self, slot);
  bool mixed = how == reaction::ack || how == reaction::nack;
  auto n = batch.deliveries_size();
  if (how == reaction::touch)
    n = 0;
  else if (mixed && !w.healed && w.consumer_gen.chance(1, 8))
    n = static_cast<int>(w.consumer_gen.below(static_cast<uint64_t>(n)));
  net::delivery_batch_reply reply;
  for (int i = 0; i < n; ++i) {
    bool nack =
      mixed && !w.healed && w.consumer_gen.below(1'000'000) < w.params.nack_ppm;
    *reply.pb.add_replies() =
      nack ? nack_verdict(w) : verdict(v1::DeliveryReply::VERDICT_ACK);
  }
  if (how == reaction::touch)
    for (const auto& d : batch.deliveries())
      touch_later(w, w.consumers[slot].home, d.id());
  if (mixed || how == reaction::touch) {
    tell_batch(w, refs, reply.pb);
    return reply;
  }
  auto rp = self->make_response_promise<net::delivery_batch_reply>();
  if (how == reaction::hang)
    w.hung_batches.push_back(rp);
  else if (how == reaction::dawdle)
    answer_late(w, rp, reply,
                [&w, refs, pb = reply.pb] { tell_batch(w, refs, pb); });
  return rp;
}

caf::behavior consumer_impl(caf::event_based_actor* self, world* wp,
                            size_t slot) {
  return {
    [self, wp,
     slot](net::delivery_msg& msg) -> caf::result<net::delivery_reply> {
      return on_delivery(self, *wp, slot, msg.pb);
    },
    [self, wp, slot](
      net::delivery_batch_msg& msg) -> caf::result<net::delivery_batch_reply> {
      wp->event("batch of " + std::to_string(msg.pb.deliveries_size()) +
                " to consumer " + std::to_string(wp->consumers[slot].number));
      return on_batch(self, *wp, slot, msg.pb);
    },
  };
}

void subscribe(world& w, size_t slot) {
  v1::SubscribeRequest sub;
  sub.set_topic(w.consumers[slot].topic);
  auto engine = engine_at(w, w.consumers[slot].home);
  if (!engine)
    return; // Its node is down: it subscribes again when the node is up.
  auto send = [&w, engine](auto handle, v1::SubscribeRequest sub) {
    w.sys->spawn(
      [engine, sub, handle](caf::event_based_actor* self, int) {
        self
          ->request(engine, caf::infinite, net::subscribe_request{sub}, handle)
          .then([self](net::empty_reply&) { self->quit(); },
                [self](caf::error&) { self->quit(); });
        // Stays until the answer comes (an empty behavior would quit at
        // once).
        return caf::behavior{[](answer_atom) {}};
      },
      0);
  };
  if (w.params.max_batch > 1) {
    sub.set_max_batch(w.params.max_batch);
    send(caf::actor_cast<batch_consumer_actor>(w.consumers[slot].handle),
         std::move(sub));
  } else {
    send(caf::actor_cast<consumer_actor>(w.consumers[slot].handle),
         std::move(sub));
  }
}

void spawn_consumer(world& w, size_t slot) {
  auto number = w.next_consumer++;
  auto tap = [&w, number](const caf::mailbox_element& el) {
    const auto& content = el.content();
    if (content.match_elements<net::delivery_msg>()) {
      observe_sent(w, number, content.get_as<net::delivery_msg>(0).pb);
    } else if (content.match_elements<net::delivery_batch_msg>()) {
      for (const auto& d :
           content.get_as<net::delivery_batch_msg>(0).pb.deliveries())
        observe_sent(w, number, d);
    }
  };
  auto& c = w.consumers[slot];
  c.handle = w.sys->spawn<tapped_actor>(
    std::move(tap), [&w, slot](caf::event_based_actor* self) {
      return consumer_impl(self, &w, slot);
    });
  c.alive = true;
  c.number = number;
  w.live_consumers.insert(number);
  subscribe(w, slot);
}

// -- the engine's life --------------------------------------------------------

void start_engine(world& w) {
  w.engine = actors::spawn_engine(*w.sys, w.cfg);
  for (size_t i = 0; i < w.consumers.size(); ++i)
    if (w.consumers[i].alive)
      subscribe(w, i);
}

/// Runs one message of one ready actor, the actor drawn from the seed.
void step(world& w) {
  auto& jobs = w.sched->jobs;
  auto k = w.sched_gen.pick(jobs.size());
  std::swap(jobs[0], jobs[k]);
  w.sched->run_once();
  ++w.steps;
  notice_disk_failures(w);
}

/// Time that a step took: moves the clock on to the next timer if it is at
/// most `max_ms` away and fires it, while other jobs are still ready. A
/// delivery still queued then may outlive half its lease and go back to its
/// shard unsent, its attempt spent: attempts may skip, as after a fault.
void pass_time_while_working(world& w, int64_t max_ms) {
  auto& clock = w.sched->clock();
  auto next = clock.schedule().begin()->first;
  if (next > clock.current_time + std::chrono::milliseconds{max_ms})
    return;
  if (next > clock.current_time) {
    auto before = w.true_ms();
    clock.current_time = next;
    w.event("time passes while actors work: " +
            std::to_string(w.true_ms() - before) + " ms");
    w.checks.disturbance();
  }
  clock.trigger_timeout();
}

/// Runs every ready job, in the seed's order.
void drain(world& w) {
  while (w.sched->has_job())
    step(w);
}

/// The shard actors of the running engine (the supervisor watches them,
/// so they outlive an engine that is killed).
std::vector<caf::actor> shard_handles(world& w, const engine_actor& engine) {
  caf::scoped_actor self{*w.sys};
  auto handle = self->request(caf::actor_cast<caf::actor>(engine),
                              caf::infinite, actors::shards_atom::value);
  drain(w);
  std::vector<caf::actor> out;
  if (!self->mailbox().empty())
    handle.receive([&](actors::shard_handles_msg& msg) { out = msg.shards; },
                   [](caf::error&) {});
  return out;
}

/// Arms a power cut: the disk takes `ops` more writes and syncs, then
/// fails everything, as if the machine had lost power at that point of
/// its I/O (mid-commit, between a WAL append and its fsync, ...).
void arm_node_crash(world& w, uint64_t ops);

void arm_crash(world& w) {
  auto ops = static_cast<uint64_t>(w.fault_gen.between(0, 30));
  if (w.clustered())
    return arm_node_crash(w, ops);
  w.event("power cut after " + std::to_string(ops) + " more writes");
  w.fs->die_after(ops);
  w.crash_pending = true;
}

/// While the engine is down, maybe rewrites one acknowledged task's stored
/// record with bytes that pass RocksDB's checksums but do not decode (a
/// faulty writer's, or memory gone bad before the checksum): the shard
/// must quarantine it, never deliver it again, and count it in stats.
void damage_record(world& w) {
  auto& g = w.damage_gen;
  if (g.below(1'000'000) >= w.params.damage_ppm)
    return;
  std::vector<uint64_t> ids;
  std::set_difference(w.client_known.begin(), w.client_known.end(),
                      w.damaged_ids.begin(), w.damaged_ids.end(),
                      std::back_inserter(ids));
  if (ids.empty())
    return;
  auto id = ids[g.pick(ids.size())];
  static constexpr std::pair<storage::record_damage, const char*> kinds[] = {
    {storage::record_damage::garbage, "garbage"},
    {storage::record_damage::invalid_field, "invalid field"},
    {storage::record_damage::wrong_id, "wrong id"},
  };
  auto [how, name] = kinds[g.pick(std::size(kinds))];
  auto shard = core::shard_of(id, w.cfg.shard_count);
  auto opts = actors::shard_store_options(w.cfg, shard);
  // The damage is not the engine's I/O: it bypasses the fault file system
  // (and the write and sync faults armed there). Files it did not create
  // count as durable.
  opts.file_system = nullptr;
  auto err = storage::damage_task_record(opts, id, how);
  auto task = "task " + std::to_string(id);
  if (err.code() == core::errc::not_found) {
    w.event("damage: " + task + " has no stored record");
    return;
  }
  if (err) {
    w.fail({"harness",
            "damaging the record of " + task + " failed: " + err.message()});
    return;
  }
  w.event("damage: the record of " + task + " (" + name + ")");
  w.checks.damaged(id);
  w.damaged_ids.insert(id);
  ++w.damaged;
}

/// The power cut happened: the engine's actors all die, what the disk
/// never synced is gone, and a new engine starts on what survived.
void crash(world& w) {
  w.crash_pending = false;
  w.fs->set_active(false);
  w.event("crash");
  auto shards = shard_handles(w, w.engine);
  for (auto& s : shards)
    caf::anon_send_exit(s, caf::exit_reason::kill);
  caf::anon_send_exit(w.engine, caf::exit_reason::kill);
  w.engine = nullptr;
  drain(w);
  if (auto err = w.fs->drop_unsynced_data())
    w.fail({"harness", "dropping unsynced data failed: " + err.message()});
  w.fs->set_active(true);
  damage_record(w);
  w.checks.restart();
  ++w.restarts;
  start_engine(w);
}

// -- the workload -------------------------------------------------------------

/// With batch consumers, absolute due times fall on a 5 s grid, so that
/// tasks come due together and go out in batches (without, tasks are
/// spread so thin that a batch seldom forms). Draws nothing.
int64_t due_on_grid(const world& w, int64_t due_ms) {
  if (w.params.max_batch <= 1)
    return due_ms;
  constexpr int64_t grid_ms = 5'000;
  auto rest = due_ms % grid_ms;
  return rest == 0 ? due_ms : due_ms + (grid_ms - rest);
}

v1::ScheduleRequest plan_schedule(world& w) {
  auto& g = w.work_gen;
  v1::ScheduleRequest req;
  req.set_topic("t" + std::to_string(g.below(w.params.topics)));
  req.set_payload("p" + std::to_string(w.next_key));
  req.set_idempotency_key("k" + std::to_string(w.next_key++));
  auto* policy = req.mutable_policy();
  policy->set_lease_ms(g.between(200, w.params.max_lease_ms));
  policy->set_max_attempts(
    static_cast<uint32_t>(g.between(1, w.params.max_attempts)));
  policy->set_backoff_initial_ms(g.between(50, 1'000));
  policy->set_backoff_multiplier_permille(2'000);
  policy->set_backoff_max_ms(5'000);
  auto* when = req.mutable_when();
  switch (g.below(6)) {
    case 0:
    case 1:
      when->set_at_ms(due_on_grid(w, w.true_ms() + g.between(-2'000, 60'000)));
      break;
    case 2:
      when->set_in_ms(g.between(0, 30'000));
      break;
    case 3:
      when->set_every_ms(g.between(1'000, 10'000));
      when->set_max_count(static_cast<uint64_t>(g.between(1, 4)));
      break;
    case 4: {
      static constexpr int steps[] = {2, 3, 5, 7};
      auto* cron = when->mutable_cron();
      cron->set_expression("*/" + std::to_string(steps[g.below(4)]) +
                           " * * * * *");
      when->set_max_count(static_cast<uint64_t>(g.between(1, 3)));
      break;
    }
    default: {
      auto* list = when->mutable_intervals();
      auto n = g.between(1, 3);
      for (int64_t i = 0; i < n; ++i)
        list->add_intervals_ms(g.between(500, 5'000));
      break;
    }
  }
  return req;
}

/// What the client asks for in `req`, as the oracle keeps it.
task_request asked_in(const v1::ScheduleRequest& req) {
  task_request out;
  out.key = req.idempotency_key();
  out.topic = req.topic();
  out.payload = req.payload();
  const auto& p = req.policy();
  out.lease_ms = p.lease_ms();
  out.max_attempts = p.max_attempts();
  out.backoff_initial_ms = p.backoff_initial_ms();
  out.backoff_multiplier_permille = p.backoff_multiplier_permille();
  out.backoff_max_ms = p.backoff_max_ms();
  const auto& when = req.when();
  auto& w = out.when;
  w.max_count = when.max_count();
  using kind = when_asked::kind;
  if (when.has_at_ms()) {
    w.what = kind::at;
    w.at_ms = when.at_ms();
  } else if (when.has_in_ms()) {
    w.what = kind::in;
    w.in_ms = when.in_ms();
  } else if (when.has_every_ms()) {
    w.what = kind::every;
    w.every_ms = when.every_ms();
  } else if (when.has_cron()) {
    w.what = kind::cron;
    w.cron = when.cron().expression();
  } else {
    w.what = kind::intervals;
    const auto& list = when.intervals().intervals_ms();
    w.intervals_ms.assign(list.begin(), list.end());
  }
  return out;
}

void send_schedule(world& w, v1::ScheduleRequest req, int attempt) {
  auto node = static_cast<uint32_t>(1 + w.work_gen.below(4));
  auto key = req.idempotency_key();
  w.event("schedule " + key + " attempt " + std::to_string(attempt) + " " +
          req.when().ShortDebugString());
  call_hooks<net::schedule_reply> hooks;
  hooks.arrived = [&w, asked = asked_in(req)] {
    w.checks.schedule_arrived(asked, w.true_ms());
  };
  hooks.answered = [&w, key](const std::optional<net::schedule_reply>& a) {
    if (!a) {
      w.event("engine fails schedule " + key);
      return;
    }
    w.event("engine answers schedule " + key + ": " +
            std::to_string(a->pb.id()) +
            (a->pb.created() ? " created" : " known"));
    w.check(w.checks.schedule_answered(key, a->pb.id(), w.true_ms()));
  };
  hooks.done = [&w, req, attempt, key](std::optional<net::schedule_reply> a) {
    if (!a) {
      w.event("schedule " + key + " unknown");
      if (attempt < retries && !w.failure)
        send_schedule(w, req, attempt + 1);
      return;
    }
    w.event("schedule " + key + " -> " + std::to_string(a->pb.id()));
    ++w.acknowledged;
    w.client_known.insert(a->pb.id());
  };
  call(w, node, pick_node(w), net::schedule_request{std::move(req)},
       std::move(hooks));
}

uint64_t pick_id(world& w) {
  std::vector<uint64_t> ids(w.client_known.begin(), w.client_known.end());
  if (ids.empty() || w.work_gen.chance(1, 10))
    return 1 + w.work_gen.below(1'000); // Maybe unknown.
  return ids[w.work_gen.pick(ids.size())];
}

change_answer answer_of(const std::optional<net::change_reply>& a) {
  if (!a)
    return change_answer::failed;
  switch (a->pb.outcome()) {
    case v1::CHANGE_OUTCOME_DONE:
      return change_answer::done;
    case v1::CHANGE_OUTCOME_IN_FLIGHT:
      return change_answer::in_flight;
    case v1::CHANGE_OUTCOME_COMPLETED:
      return change_answer::completed;
    default:
      return change_answer::not_found;
  }
}

std::string outcome_name(const std::optional<net::change_reply>& a) {
  return a ? v1::ChangeOutcome_Name(a->pb.outcome()) : std::string{"unknown"};
}

void send_revoke(world& w) {
  auto id = pick_id(w);
  auto what = "revoke " + std::to_string(id);
  w.event(what);
  v1::RevokeRequest req;
  req.set_id(id);
  call_hooks<net::change_reply> hooks;
  hooks.arrived = [&w, id] { w.checks.revoke_arrived(id); };
  hooks.answered = [&w, id, what](const std::optional<net::change_reply>& a) {
    w.event("engine answers " + what + ": " +
            (a ? v1::ChangeOutcome_Name(a->pb.outcome()) : "an error"));
    w.checks.revoke_answered(id, answer_of(a));
  };
  hooks.done = [&w, what](std::optional<net::change_reply> a) {
    w.event(what + " -> " + outcome_name(a));
  };
  auto client = 1 + static_cast<uint32_t>(w.work_gen.below(4));
  call(w, client, pick_node(w), net::revoke_request{req}, std::move(hooks));
}

void send_reschedule(world& w) {
  auto id = pick_id(w);
  auto due = due_on_grid(w, w.true_ms() + w.work_gen.between(0, 30'000));
  auto what = "reschedule " + std::to_string(id);
  w.event(what + " to " + std::to_string(due - t0_ms));
  v1::RescheduleRequest req;
  req.set_id(id);
  req.set_due_ms(due);
  call_hooks<net::change_reply> hooks;
  hooks.arrived = [&w, id, due] { w.checks.reschedule_arrived(id, due); };
  hooks.answered = [](const std::optional<net::change_reply>&) {};
  hooks.done = [&w, what](std::optional<net::change_reply> a) {
    w.event(what + " -> " + outcome_name(a));
  };
  auto client = 1 + static_cast<uint32_t>(w.work_gen.below(4));
  call(w, client, pick_node(w), net::reschedule_request{req}, std::move(hooks));
}

// -- faults -------------------------------------------------------------------

void disk_fault(world& w) {
  auto& g = w.fault_gen;
  storage::fault_spec spec;
  spec.kinds = storage::file_kind::wal;
  // EIO only: after ENOSPC RocksDB recovers by itself on a background
  // thread, in real time, which would make runs differ from one another.
  spec.code = storage::fault_code::io_error;
  spec.torn = g.chance(1, 2);
  auto count = static_cast<uint32_t>(g.between(1, 3));
  auto* fs = w.fs.get();
  std::string where;
  if (w.clustered()) {
    auto& n = w.nodes[pick_node(w)];
    fs = n.fs.get();
    where = " on node " + std::to_string(n.id);
  }
  if (g.chance(1, 2)) {
    w.event("disk: the next " + std::to_string(count) + " WAL writes fail" +
            where);
    fs->fail_writes(count, spec);
  } else {
    w.event("disk: the next " + std::to_string(count) + " WAL syncs fail" +
            where);
    fs->fail_syncs(count, spec);
  }
}

/// The wall clock a clock fault moves: the engine's, or a random node's.
clock_model& clock_to_move(world& w, std::string& where) {
  if (!w.clustered())
    return w.clock;
  auto& n = w.nodes[pick_node(w)];
  where = " on node " + std::to_string(n.id);
  return n.clock;
}

void clock_step(world& w) {
  auto delta = w.fault_gen.between(-w.params.max_skew_ms, w.params.max_skew_ms);
  std::string where;
  auto& clock = clock_to_move(w, where);
  auto moved = clock.shift(delta);
  if (moved < 0)
    w.checks.clock_stepped_back();
  w.event("wall clock steps " + std::to_string(moved) + " ms (offset " +
          std::to_string(clock.offset_ms()) + ")" + where);
}

/// A step of the wall clock beyond the skew: seconds to hours.
void clock_jump(world& w, int64_t delta_ms) {
  w.clock.jump(delta_ms);
  if (delta_ms < 0)
    w.checks.clock_stepped_back();
  w.event("wall clock jumps " + std::to_string(delta_ms) + " ms (offset " +
          std::to_string(w.clock.offset_ms()) + ")");
}

void network_fault(world& w, bool partition) {
  auto& g = w.fault_gen;
  auto client = static_cast<uint32_t>(1 + g.below(4));
  auto node = net_id(w, pick_node(w));
  link_id there{client, node};
  link_id back{node, client};
  auto span = g.between(1'000, 20'000);
  auto now = w.true_ms();
  if (partition) {
    w.event("partition client " + std::to_string(client) + " for " +
            std::to_string(span) + " ms");
    w.net.partition(there);
    w.net.partition(back);
  } else {
    w.event("clog client " + std::to_string(client) + " for " +
            std::to_string(span) + " ms");
    w.net.clog(there, now + span);
    w.net.clog(back, now + span);
  }
  // Partitions heal by themselves too (clogs end on their own).
  if (partition) {
    w.sys->spawn(
      [&w, there, back, span](caf::event_based_actor* self, int) {
        self->delayed_send(self, std::chrono::milliseconds{span},
                           answer_atom::value);
        return caf::behavior{[&w, there, back, self](answer_atom) {
          w.net.heal(there);
          w.net.heal(back);
          self->quit();
        }};
      },
      0);
  }
}

void heal_nodes(world& w);

/// Heals every fault: network, disk, consumers; no more clock steps.
void heal(world& w) {
  w.event("heal");
  w.healed = true;
  w.healed_wall_ms = w.clock.wall_ms(w.true_ms());
  w.net.heal_all();
  if (w.clustered())
    heal_nodes(w);
  else
    w.fs->clear_faults();
  // A fresh consumer per topic, so every topic has a healthy one: the
  // deliveries that hanging consumers hold run out with their lease and go
  // to it, and a topic whose consumers all died is served again.
  for (uint32_t t = 0; t < w.params.topics; ++t) {
    auto& c = w.consumers.emplace_back();
    c.topic = "t" + std::to_string(t);
    c.home = pick_node(w);
    spawn_consumer(w, w.consumers.size() - 1);
  }
}

// -- a cluster of engines -----------------------------------------------------

/// How often the Raft nodes' timers are looked at.
constexpr int64_t raft_tick_ms = 50;

/// Sends a forwarded request's answer (or error) from node `to` back to
/// node `from` across the network; a lost answer is never relayed.
template<class Answer>
void answer_back(world& w, caf::event_based_actor* hop, uint32_t from,
                 uint32_t to, Answer answer) {
  auto now = w.true_ms();
  auto times = w.net.send({net_id(w, to), net_id(w, from)}, now);
  if (times.empty()) {
    hop->quit();
    return;
  }
  hop->delayed_send(hop, std::chrono::milliseconds{times.front() - now},
                    answer_atom::value, std::move(answer));
}

/// A forwarded request reached the engine of the shard's owner, where it
/// takes effect: for most requests the oracle heard of it at the first
/// engine already.
template<class... Ts>
void forward_arrived(world&, const Ts&...) {
  // nop
}

/// A reschedule counts where the owner takes it: it may move a delivery
/// the owner sent after the first engine took the request (the oracle
/// would otherwise judge the moved attempt against the old retry delay).
void forward_arrived(world& w, forwarded_atom,
                     const net::reschedule_request& req) {
  w.checks.reschedule_arrived(req.pb.id(), req.pb.due_ms());
}

/// Relays one request that node `from`'s engine forwards to node `to`'s
/// across the simulated network, and its answer back: each way delayed or
/// dropped as the network model says (a request that reaches a node that
/// is down is lost); when no answer comes, the forwarding engine's own
/// timeout answers.
template<class Reply, class... Ts>
caf::result<Reply> relay(caf::event_based_actor* self, world& w, uint32_t from,
                         uint32_t to, Ts... xs) {
  auto rp = self->make_response_promise<Reply>();
  auto done = std::make_shared<bool>(false);
  auto now = w.true_ms();
  // CAF links nodes over TCP: a message is delayed or lost, never
  // duplicated (a copy's answer could overtake the first's).
  auto times = w.net.send({net_id(w, from), net_id(w, to)}, now);
  times.resize(std::min<size_t>(times.size(), 1));
  for (auto at : times) {
    auto hop = [&w, rp, done, from, to, delay = at - now,
                xs...](caf::event_based_actor* hop, int) mutable {
      hop->delayed_send(hop, std::chrono::milliseconds{delay},
                        send_atom::value);
      auto finish = [hop, rp, done](auto answer) mutable {
        if (!*done) {
          *done = true;
          rp.deliver(std::move(answer));
        }
        hop->quit();
      };
      return caf::behavior{
        [&w, hop, from, to, xs...](send_atom) {
          auto engine = engine_at(w, to);
          if (!engine)
            return hop->quit();
          forward_arrived(w, xs...);
          hop
            ->request(caf::actor_cast<caf::actor>(engine), caf::infinite, xs...)
            .then([&w, hop, from,
                   to](Reply& r) { answer_back(w, hop, from, to, r); },
                  [&w, hop, from, to](caf::error& e) {
                    answer_back(w, hop, from, to, e);
                  });
        },
        [finish](answer_atom, Reply& r) mutable { finish(std::move(r)); },
        [finish](answer_atom, caf::error& e) mutable { finish(std::move(e)); },
      };
    };
    w.sys->spawn(hop, 0);
  }
  return rp;
}

/// A handler of `(forwarded_atom, Ts...)` that relays it.
template<class Reply, class... Ts>
auto relaying(caf::event_based_actor* self, world& w, uint32_t from,
              uint32_t to) {
  return [self, &w, from, to](forwarded_atom, Ts&... xs) -> caf::result<Reply> {
    return relay<Reply>(self, w, from, to, forwarded_atom::value, xs...);
  };
}

/// What node `from`'s engine has as node `to`'s engine: every request it
/// forwards there crosses the simulated network.
caf::behavior peer_proxy(caf::event_based_actor* self, world* wp, uint32_t from,
                         uint32_t to) {
  auto& w = *wp;
  return {
    relaying<net::schedule_reply, net::schedule_request>(self, w, from, to),
    relaying<net::schedule_batch_reply, net::schedule_batch_request>(self, w,
                                                                     from, to),
    relaying<net::change_reply, net::revoke_request>(self, w, from, to),
    relaying<net::change_reply, net::reschedule_request>(self, w, from, to),
    relaying<net::change_reply, net::kick_request>(self, w, from, to),
    relaying<net::get_reply, net::get_request>(self, w, from, to),
    relaying<net::empty_reply, net::ack_request>(self, w, from, to),
    relaying<net::empty_reply, net::nack_request>(self, w, from, to),
    relaying<net::empty_reply, net::touch_request>(self, w, from, to),
    relaying<net::dead_letters_reply, net::dead_letters_request>(self, w, from,
                                                                 to),
    relaying<net::empty_reply, net::subscribe_request, consumer_actor>(
      self, w, from, to),
    relaying<net::empty_reply, net::subscribe_request, batch_consumer_actor>(
      self, w, from, to),
    relaying<net::empty_reply, net::unsubscribe_request, consumer_actor>(
      self, w, from, to),
  };
}

/// Gives every running engine fresh proxies of the other running ones (a
/// node that is down is not a peer, as a peer monitor would find): each
/// engine makes its subscriptions at every peer again.
void refresh_peers(world& w) {
  for (auto& n : w.nodes) {
    if (!n.engine)
      continue;
    actors::set_peers_msg msg;
    for (auto& m : w.nodes)
      if (m.index != n.index && m.engine)
        msg.engines.emplace(m.id, caf::actor_cast<engine_actor>(w.sys->spawn(
                                    peer_proxy, &w, n.index, m.index)));
    caf::anon_send(caf::actor_cast<caf::actor>(n.engine), std::move(msg));
  }
}

int64_t mono_ms(const world& w, const world::node_state& n) {
  return n.mono_offset_ms + (w.true_ms() - t0_ms);
}

std::string node_name(const world::node_state& n) {
  return "node " + std::to_string(n.id);
}

/// Every shard runs on one node at most: no two running engines report
/// the same shard open.
void check_one_runner(world& w) {
  std::map<uint32_t, cluster::node_id> runner;
  for (const auto& n : w.nodes) {
    if (!n.engine)
      continue;
    for (auto s : n.running) {
      auto [i, fresh] = runner.try_emplace(s, n.id);
      if (!fresh)
        w.fail({"one_runner", "shard " + std::to_string(s) + " runs on nodes " +
                                std::to_string(i->second) + " and " +
                                std::to_string(n.id)});
    }
  }
}

/// The engine of node `index` (still `engine`) answered a map install.
void map_installed(world& w, uint32_t index, const engine_actor& engine,
                   const actors::map_installed_msg& m) {
  auto& n = w.nodes[index];
  if (n.engine != engine)
    return; // The node crashed since.
  auto list = [](const std::vector<uint32_t>& xs) {
    std::string out;
    for (auto x : xs)
      out += (out.empty() ? "" : ",") + std::to_string(x);
    return "[" + out + "]";
  };
  for (auto s : m.opened)
    n.running.insert(s);
  for (auto s : m.closed)
    n.running.erase(s);
  w.event(node_name(n) + " runs epoch " + std::to_string(m.epoch) +
          ": opened " + list(m.opened) + " closed " + list(m.closed) +
          " failed " + list(m.failed));
  check_one_runner(w);
}

/// The map node `index`'s engine is handed for the committed `state`
/// (with grab-shard planted, node 1 takes one more shard).
core::shard_map map_for(world& w, uint32_t index,
                        const cluster::cluster_map& state) {
  auto map = state.to_core();
  if (w.opts.plant != planted_bug::grab_shard || index != 0)
    return map;
  for (auto& s : map.shards)
    if (s.owner != w.nodes[index].id) {
      s.owner = w.nodes[index].id;
      break;
    }
  return map;
}

void send_next_map(world& w, uint32_t index);

/// The engine (still `engine`) answered the first of node `index`'s maps:
/// the next goes.
void map_answered(world& w, uint32_t index, const engine_actor& engine) {
  auto& n = w.nodes[index];
  if (n.engine != engine)
    return; // The node crashed since.
  n.maps.pop_front();
  send_next_map(w, index);
}

/// Hands node `index`'s engine the first of its maps, as the node's glue
/// does: one at a time, each after the answer to the one before.
void send_next_map(world& w, uint32_t index) {
  auto& n = w.nodes[index];
  if (n.maps.empty())
    return;
  auto engine = n.engine;
  auto msg = actors::install_map_msg{n.maps.front()};
  w.event(node_name(n) + " installs map epoch " +
          std::to_string(msg.map.epoch));
  w.sys->spawn(
    [&w, index, engine, msg](caf::event_based_actor* self, int) {
      self->request(caf::actor_cast<caf::actor>(engine), caf::infinite, msg)
        .then(
          [&w, index, engine, self](actors::map_installed_msg& m) {
            map_installed(w, index, engine, m);
            map_answered(w, index, engine);
            self->quit();
          },
          [&w, index, engine, self, epoch = msg.map.epoch](caf::error& err) {
            // Maps go in commit order, each newer than the last: the
            // engine must take every one.
            if (w.nodes[index].engine == engine)
              w.fail({"map_install", node_name(w.nodes[index]) +
                                       " refused the committed map of epoch " +
                                       std::to_string(epoch) + ": " +
                                       net::describe(err)});
            map_answered(w, index, engine);
            self->quit();
          });
      return caf::behavior{[](answer_atom) {}};
    },
    0);
}

/// Node `index` applied (or installed) the committed map `state`: its
/// engine gets it if it is newer than the last it got, in commit order.
void install_map(world& w, uint32_t index, const cluster::cluster_map& state) {
  auto& n = w.nodes[index];
  if (!n.engine || state.shard_count() == 0 || state.epoch <= n.sent_epoch)
    return;
  n.sent_epoch = state.epoch;
  n.maps.push_back(map_for(w, index, state));
  if (n.maps.size() == 1)
    send_next_map(w, index);
}

void send_raft(world& w, uint32_t from, cluster::envelope env);

/// What node `index`'s Raft node did: its commits checked and handed to
/// its engine, its messages sent.
void absorb(world& w, uint32_t index, cluster::raft_effects fx) {
  auto& n = w.nodes[index];
  try {
    if (fx.installed) {
      w.history->installed(n.id, *fx.installed);
      install_map(w, index, fx.installed->state);
    }
    for (const auto& a : fx.applied) {
      w.history->applied(n.id, n.raft->term(), a);
      install_map(w, index, a.state);
    }
    if (n.raft->is_leader())
      w.history->leader(n.id, n.raft->term());
  } catch (const raft_failure& f) {
    w.fail({f.v.invariant, f.v.detail});
    return;
  }
  for (auto& env : fx.messages)
    send_raft(w, index, std::move(env));
}

void send_raft(world& w, uint32_t from, cluster::envelope env) {
  auto to = static_cast<uint32_t>(env.to - 1);
  auto now = w.true_ms();
  for (auto at : w.net.send({net_id(w, from), net_id(w, to)}, now))
    w.plan->emplace(at, [&w, from, to, msg = env.msg] {
      auto& n = w.nodes[to];
      if (n.raft && !w.failure)
        absorb(w, to, n.raft->on_message(mono_ms(w, n), w.nodes[from].id, msg));
    });
}

/// The node that leads (the first that believes it does), or null.
world::node_state* coordinator(world& w) {
  for (auto& n : w.nodes)
    if (n.raft && n.raft->is_leader())
      return &n;
  return nullptr;
}

void propose(world& w, world::node_state& n, const cluster::command& cmd) {
  w.event("propose " + cluster::to_string(cmd) + " at " + node_name(n));
  absorb(w, n.index, n.raft->propose(mono_ms(w, n), cmd));
}

/// A leader whose map has no shards yet proposes the cluster's creation,
/// once per term (as dallyd's first coordinator does).
void propose_create(world& w, world::node_state& n) {
  if (!n.raft || !n.raft->is_leader() || n.raft->state().shard_count() > 0 ||
      n.create_term == n.raft->term())
    return;
  n.create_term = n.raft->term();
  cluster::create_map create{w.params.shards, {}};
  for (const auto& m : w.nodes)
    create.nodes.push_back(m.id);
  propose(w, n, create);
}

/// A client asks the coordinator to mark a member leaving, or active
/// again. Never `reassign`: a shard's data stays in its owner's directory,
/// so a moved shard would open empty on its new owner (docs/cluster.md).
void change_map(world& w) {
  auto* n = coordinator(w);
  if (n == nullptr) {
    w.event("map change: no coordinator");
    return;
  }
  auto& target = w.nodes[pick_node(w)];
  const auto* m = n->raft->state().find(target.id);
  if (m != nullptr && m->state == cluster::member::status::active)
    propose(w, *n, cluster::remove_node{target.id});
  else
    propose(w, *n, cluster::add_node{target.id});
}

void tick_nodes(world& w) {
  for (auto& n : w.nodes) {
    if (!n.raft)
      continue;
    absorb(w, n.index, n.raft->on_tick(mono_ms(w, n)));
    if (w.failure)
      return;
    propose_create(w, n);
  }
}

void schedule_ticks(world& w, int64_t at_ms, int64_t end_ms) {
  w.plan->emplace(at_ms, [&w, at_ms, end_ms] {
    tick_nodes(w);
    if (at_ms + raft_tick_ms < end_ms)
      schedule_ticks(w, at_ms + raft_tick_ms, end_ms);
  });
}

/// Node `index`'s Raft node starts from its log store; its engine gets the
/// map it holds.
void start_raft(world& w, uint32_t index) {
  auto& n = w.nodes[index];
  cluster::raft_config cfg;
  cfg.self = n.id;
  for (const auto& m : w.nodes)
    cfg.voters.push_back(m.id);
  cfg.snapshot_every = 16;
  // Twice raft_config's defaults: half the messages, for runs under
  // sanitizers in CI.
  cfg.heartbeat_ms = 200;
  cfg.election_min_ms = 1'000;
  cfg.election_max_ms = 2'000;
  cfg.seed = w.cluster_gen.next();
  n.raft = std::make_unique<cluster::raft_node>(cfg, *n.log, mono_ms(w, n));
  w.history->start(n.id, n.raft->applied_index(), n.raft->state().epoch);
  install_map(w, index, n.raft->state());
}

void restart_node(world& w, uint32_t index) {
  auto& n = w.nodes[index];
  if (n.engine)
    return;
  w.event(node_name(n) + " restarts");
  n.engine = actors::spawn_engine(*w.sys, n.cfg);
  start_raft(w, index);
  for (size_t i = 0; i < w.consumers.size(); ++i)
    if (w.consumers[i].alive && w.consumers[i].home == index)
      subscribe(w, i);
  refresh_peers(w);
}

/// Arms a power cut of one node (half the time the coordinator's).
void arm_node_crash(world& w, uint64_t ops) {
  auto* n = &w.nodes[pick_node(w)];
  if (w.cluster_gen.chance(1, 2))
    if (auto* c = coordinator(w))
      n = c;
  if (!n->engine) {
    w.event(node_name(*n) + " is down already");
    return;
  }
  w.event("power cut on " + node_name(*n) + " after " + std::to_string(ops) +
          " more writes");
  n->fs->die_after(ops);
  n->crash_pending = true;
}

/// A node's power cut happened: its engine and Raft node die, what its
/// disk never synced is gone, and it comes back a while later (at once
/// after the heal). Meanwhile its shards are unavailable.
void crash_node(world& w, uint32_t index) {
  auto& n = w.nodes[index];
  n.crash_pending = false;
  n.fs->set_active(false);
  bool led = n.raft && n.raft->is_leader();
  w.event("crash " + node_name(n) + (led ? " (coordinator)" : ""));
  if (n.engine) {
    for (auto& s : shard_handles(w, n.engine))
      caf::anon_send_exit(s, caf::exit_reason::kill);
    caf::anon_send_exit(n.engine, caf::exit_reason::kill);
  }
  n.engine = nullptr;
  n.raft.reset();
  n.running.clear();
  n.maps.clear();
  n.sent_epoch = 0;
  drain(w);
  if (auto err = n.fs->drop_unsynced_data())
    w.fail({"harness", "dropping unsynced data failed: " + err.message()});
  n.fs->set_active(true);
  w.checks.restart();
  ++w.restarts;
  refresh_peers(w);
  auto back_ms = w.healed ? 0 : w.cluster_gen.between(500, 15'000);
  w.plan->emplace(w.true_ms() + back_ms,
                  [&w, index] { restart_node(w, index); });
}

/// Cuts links between nodes for `span_ms` (Raft and forwarded requests
/// alike): one node isolated, one direction of one link, or a split.
void partition_nodes(world& w) {
  auto& g = w.cluster_gen;
  auto span = g.between(1'000, 20'000);
  auto a = pick_node(w);
  std::vector<link_id> cut;
  auto both = [&](uint32_t x, uint32_t y) {
    cut.push_back({net_id(w, x), net_id(w, y)});
    cut.push_back({net_id(w, y), net_id(w, x)});
  };
  std::string what;
  switch (g.below(3)) {
    case 0:
      for (uint32_t b = 0; b < w.nodes.size(); ++b)
        if (b != a)
          both(a, b);
      what = "isolate " + node_name(w.nodes[a]);
      break;
    case 1: {
      auto b = pick_node(w);
      if (b != a)
        cut.push_back({net_id(w, a), net_id(w, b)});
      what = "cut node " + std::to_string(a + 1) + " -> node " +
             std::to_string(b + 1);
      break;
    }
    default: {
      std::vector<bool> side(w.nodes.size());
      for (size_t i = 0; i < side.size(); ++i)
        side[i] = g.chance(1, 2);
      for (uint32_t x = 0; x < side.size(); ++x)
        for (uint32_t y = x + 1; y < side.size(); ++y)
          if (side[x] != side[y])
            both(x, y);
      what = "split the nodes";
      break;
    }
  }
  w.event(what + " for " + std::to_string(span) + " ms");
  for (auto l : cut)
    w.net.partition(l);
  w.plan->emplace(w.true_ms() + span, [&w, cut] {
    for (auto l : cut)
      w.net.heal(l);
  });
}

/// At the heal: disks without faults, links between nodes without loss,
/// every node up, and every engine with fresh peers.
void heal_nodes(world& w) {
  link_faults light{0, std::min<int64_t>(w.params.net_max_delay_ms, 50), 0, 0};
  for (auto& n : w.nodes) {
    n.fs->clear_faults();
    for (auto& m : w.nodes)
      if (m.index != n.index)
        w.net.set_faults({net_id(w, n.index), net_id(w, m.index)}, light);
  }
  for (auto& n : w.nodes)
    restart_node(w, n.index);
  refresh_peers(w);
}

/// What keeps the cluster from having converged: no coordinator, a node
/// without the newest committed map, or an engine not running exactly its
/// shards of it; nothing once it has.
std::optional<std::string> convergence_gap(world& w) {
  if (coordinator(w) == nullptr)
    return "no coordinator";
  const auto& map = w.history->latest();
  for (auto& n : w.nodes) {
    auto who = node_name(n);
    if (!n.raft || n.raft->state() != map)
      return who + " does not hold the committed map (epoch " +
             std::to_string(map.epoch) + ")";
    std::set<uint32_t> owned;
    for (uint32_t s = 0; s < map.shard_count(); ++s)
      if (map.shards[s].owner == n.id)
        owned.insert(s);
    if (n.running != owned)
      return who + " does not run exactly its shards of the map of epoch " +
             std::to_string(map.epoch);
  }
  return std::nullopt;
}

/// After the heal, every tick until the cluster has converged (a
/// coordinator, every node holding the newest committed map, every engine
/// running exactly its shards of it), which must happen by `deadline_ms`.
/// Converged at some moment within the bound, not at its end: an election
/// may start at any time (a stall of every node longer than an election
/// timeout starts one), and one in progress at the deadline is no failure.
void watch_convergence(world& w, int64_t deadline_ms) {
  auto gap = w.healed ? convergence_gap(w) : std::string{"not healed"};
  if (!gap) {
    w.event("converged on the map of epoch " +
            std::to_string(w.history->latest().epoch));
    return;
  }
  if (w.true_ms() >= deadline_ms)
    return w.fail(
      {"convergence",
       *gap + " " + std::to_string(converge_within_ms) + " ms after the heal"});
  w.plan->emplace(w.true_ms() + raft_tick_ms,
                  [&w, deadline_ms] { watch_convergence(w, deadline_ms); });
}

// -- the end ------------------------------------------------------------------

/// How long after the heal, or after its due time if later (both on the
/// engine's wall clock), a task's first occurrence must have left the
/// engine: deliveries that hung consumers hold run out within a lease
/// (touches stretch it to twice the maximum, late answers take up to
/// twice the lease) and free their topic's slots; a topic whose
/// unanswered cap is small serves its backlog a round trip at a time;
/// a restart armed before the heal and the slow steps take seconds; two
/// minutes of slack cover the rest (a power cut and a damaged record just
/// before the heal took healthy runs past a minute).
int64_t prompt_bound_ms(const sim_params& p) {
  int64_t queue_ms = 0;
  if (p.max_unanswered_per_topic > 0)
    queue_ms = static_cast<int64_t>(p.tasks) * 2 * (p.net_max_delay_ms + 10) /
               p.max_unanswered_per_topic;
  return 120'000 + 3 * p.max_lease_ms + queue_ms;
}

/// Asks the engine (directly, no network) for `req`'s answer.
template<class Reply, class Request>
std::optional<Reply> ask(world& w, caf::scoped_actor& self, Request req) {
  auto handle = self->request(w.engine, caf::infinite, std::move(req));
  drain(w);
  std::optional<Reply> out;
  if (self->mailbox().empty())
    return out;
  handle.receive([&](Reply& reply) { out = std::move(reply); },
                 [&](caf::error&) {});
  return out;
}

/// Every dead letter's id and attempt count, or nothing if the engine does
/// not list them.
std::optional<std::map<uint64_t, uint32_t>>
dead_letters(world& w, caf::scoped_actor& self) {
  std::map<uint64_t, uint32_t> dead;
  uint64_t after = 0;
  for (;;) {
    v1::DeadLettersRequest req;
    req.set_after_id(after);
    req.set_limit(100);
    auto page =
      ask<net::dead_letters_reply>(w, self, net::dead_letters_request{req});
    if (!page)
      return std::nullopt;
    for (const auto& d : page->pb.dead()) {
      dead[d.task().id()] = d.task().attempt();
      after = std::max(after, d.task().id());
    }
    if (page->pb.dead_size() < 100)
      return dead;
  }
}

/// The engine's view of task `id` (`get`), and a dead letter's attempt
/// count; nothing if it does not answer. For a live task, `next_ms` is when
/// the engine says it acts on it next (due, retry or lease end).
std::optional<std::pair<final_state, uint32_t>>
final_state_of(world& w, caf::scoped_actor& self, const engine_actor& engine,
               uint64_t id, int64_t& next_ms) {
  v1::GetRequest get;
  get.set_id(id);
  auto handle = self->request(engine, caf::infinite, net::get_request{get});
  drain(w);
  std::optional<std::pair<final_state, uint32_t>> out;
  if (self->mailbox().empty())
    return out;
  handle.receive(
    [&](net::get_reply& reply) {
      out.emplace(reply.pb.dead() ? final_state::dead : final_state::live,
                  reply.pb.task().attempt());
      const auto& t = reply.pb.task();
      next_ms = std::max({t.due_ms(), t.retry_at_ms(), t.lease_deadline_ms()});
    },
    [&](caf::error& err) {
      auto code = net::from_caf(err).code();
      if (code == core::errc::not_found)
        out.emplace(final_state::gone, 0);
      else if (code == core::errc::corrupt_record)
        out.emplace(final_state::quarantined, 0);
    });
  return out;
}

/// Every damaged record has been read by the end (by `get`, if not
/// before), so each must be in quarantine and counted; every schedule is
/// answered, so the engine's admission counts none pending.
void check_quarantined(world& w, caf::scoped_actor& self) {
  auto stats =
    ask<net::stats_reply>(w, self, net::stats_request{v1::StatsRequest{}});
  if (!stats) {
    w.fail({"liveness", "the engine does not answer stats"});
    return;
  }
  if (stats->pb.quarantined() != w.damaged)
    w.fail({"corrupt_record", "the engine counts " +
                                std::to_string(stats->pb.quarantined()) +
                                " quarantined records; " +
                                std::to_string(w.damaged) + " were damaged"});
  // Every schedule has its answer by now: a count left over would refuse
  // that shard's schedules with `overloaded` for ever.
  if (stats->pb.pending_schedules() != 0)
    w.fail({"liveness", "the engine counts " +
                          std::to_string(stats->pb.pending_schedules()) +
                          " new tasks unanswered at the end"});
}

/// The liveness bound after the heal: every task whose first occurrence
/// the engine's clock says is due leaves within prompt_bound_ms of the
/// heal or of its due time, whichever is later. A task the engine no
/// longer holds as live (its deliveries were lost on the network until
/// it was dead-lettered) is for the end check to judge.
void check_prompt(world& w) {
  auto bound = prompt_bound_ms(w.params);
  auto now = w.clock.wall_ms(w.true_ms());
  for (const auto& a : w.checks.awaited_first()) {
    auto from = std::max(a.due_ms, w.healed_wall_ms);
    if (now - from < bound)
      continue;
    caf::scoped_actor self{*w.sys};
    int64_t next_ms = 0;
    auto state = final_state_of(w, self, w.engine, a.id, next_ms);
    if (state && state->first != final_state::live)
      continue;
    // As in final_checks: after the clock stepped back, a retry or lease
    // the engine worked out while its clock was ahead is due up to that
    // much later.
    if (state && w.clock.stepped_back_ms() > 0 && next_ms > now &&
        next_ms - now <= w.clock.stepped_back_ms() + bound)
      continue;
    w.fail({"liveness",
            "task " + std::to_string(a.id) + ": due " +
              std::to_string(a.due_ms) + ", first occurrence not delivered " +
              std::to_string(now - from) + " ms after " +
              (a.due_ms > w.healed_wall_ms ? "its due time" : "the heal") +
              " (engine clock; bound " + std::to_string(bound) +
              " ms; the engine has it at attempt " +
              (state ? std::to_string(state->second) : "?") + ", next at " +
              std::to_string(next_ms) + ")"});
    return;
  }
}

/// After the liveness phase: the end state of every task whose schedule
/// the engine answered.
void final_checks(world& w) {
  caf::scoped_actor self{*w.sys};
  auto dead = dead_letters(w, self);
  if (!dead) {
    w.fail({"liveness", "the engine does not list its dead letters"});
    return;
  }
  for (auto id : w.checks.known_ids()) {
    std::optional<std::pair<final_state, uint32_t>> state;
    int64_t next_ms = 0;
    if (auto it = dead->find(id); it != dead->end())
      state.emplace(final_state::dead, it->second);
    else
      state = final_state_of(w, self, w.engine, id, next_ms);
    if (!state) {
      w.fail({"liveness", "task " + std::to_string(id) +
                            ": the engine does not answer get"});
      return;
    }
    // After the clock stepped back (a forward jump returned, a step back
    // stayed), what the engine worked out while it was ahead is due up to
    // that much later: live and not due yet on the engine's clock is fine.
    if (state->first == final_state::live && w.clock.stepped_back_ms() > 0 &&
        next_ms > w.clock.wall_ms(w.true_ms())) {
      w.event("task " + std::to_string(id) +
              " not due yet: " + std::to_string(next_ms));
      continue;
    }
    w.check(w.checks.check_final(id, state->first, state->second));
    if (w.failure)
      return;
  }
  check_quarantined(w, self);
}

/// After a cluster run's liveness phase: the end state of every task whose
/// schedule an engine answered, asked of the engine of its shard's owner
/// in the newest committed map (directly, no network).
void final_checks_cluster(world& w) {
  caf::scoped_actor self{*w.sys};
  const auto& map = w.history->latest();
  for (auto id : w.checks.known_ids()) {
    std::optional<std::pair<final_state, uint32_t>> state;
    int64_t next_ms = 0;
    if (map.shard_count() > 0) {
      auto owner = map.shards[core::shard_of(id, map.shard_count())].owner;
      if (auto engine = w.nodes[owner - 1].engine)
        state = final_state_of(w, self, engine, id, next_ms);
    }
    if (!state) {
      w.fail({"liveness", "task " + std::to_string(id) +
                            ": its owner does not answer get"});
      return;
    }
    w.check(w.checks.check_final(id, state->first, state->second));
    if (w.failure)
      return;
  }
}

/// A scratch directory for the run's stores: in /dev/shm when there is
/// one (fsync costs nothing there; the fault file system still tracks
/// what was synced), else the system's temporary directory.
std::filesystem::path make_data_dir(const sim_options& opts) {
  std::filesystem::path root = opts.data_root;
  if (root.empty()) {
    std::error_code ec;
    root = std::filesystem::is_directory("/dev/shm", ec)
             ? std::filesystem::path{"/dev/shm"}
             : std::filesystem::temp_directory_path();
  }
  auto dir = root / ("dally-sim-" + std::to_string(::getpid()) + "-" +
                     std::to_string(opts.seed));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

} // namespace

// -- parameters ---------------------------------------------------------------

sim_params sim_params::draw(prng& gen) {
  sim_params p;
  p.shards = static_cast<uint32_t>(gen.between(1, 3));
  p.notifiers = static_cast<uint32_t>(gen.between(1, 2));
  p.topics = static_cast<uint32_t>(gen.between(1, 3));
  p.consumers_per_topic = static_cast<uint32_t>(gen.between(1, 3));
  p.tasks = static_cast<uint32_t>(gen.between(5, 60));
  p.revokes = static_cast<uint32_t>(gen.between(0, p.tasks / 4));
  p.reschedules = static_cast<uint32_t>(gen.between(0, p.tasks / 4));
  p.fault_phase_ms = gen.between(10'000, 120'000);
  p.crashes = static_cast<uint32_t>(gen.between(0, 3));
  p.disk_faults = static_cast<uint32_t>(gen.between(0, 3));
  p.clock_steps = static_cast<uint32_t>(gen.between(0, 4));
  p.max_skew_ms = gen.chance(1, 4) ? 0 : gen.between(1, 5'000);
  p.net_max_delay_ms = gen.between(0, 200);
  p.net_drop_ppm =
    static_cast<uint32_t>(gen.chance(1, 2) ? 0 : gen.between(0, 100'000));
  p.net_duplicate_ppm =
    static_cast<uint32_t>(gen.chance(1, 2) ? 0 : gen.between(0, 100'000));
  p.partitions = static_cast<uint32_t>(gen.between(0, 2));
  p.clogs = static_cast<uint32_t>(gen.between(0, 2));
  p.nack_ppm = static_cast<uint32_t>(gen.between(0, 200'000));
  p.slow_ppm = static_cast<uint32_t>(gen.between(0, 200'000));
  p.hang_ppm = static_cast<uint32_t>(gen.between(0, 100'000));
  p.crash_ppm = static_cast<uint32_t>(gen.between(0, 50'000));
  p.max_lease_ms = gen.between(500, 5'000);
  p.max_attempts = static_cast<uint32_t>(gen.between(1, 6));
  // Drawn last: the fields above stay what they were for every seed.
  p.damage_ppm =
    static_cast<uint32_t>(gen.chance(1, 2) ? 0 : gen.between(0, 1'000'000));
  // Drawn after damage_ppm, for the same reason.
  p.slow_step_ppm =
    static_cast<uint32_t>(gen.chance(1, 2) ? 0 : gen.between(0, 300'000));
  p.slow_step_ms = gen.between(1, 1'000);
  // Drawn after slow_step_ms, for the same reason.
  static constexpr size_t bounds[] = {0, 1, 3, 16, size_t{1} << 16};
  p.max_deferred_index = bounds[gen.pick(std::size(bounds))];
  // Drawn after max_deferred_index, for the same reason.
  p.max_batch = static_cast<uint32_t>(gen.chance(1, 2) ? 0 : gen.between(2, 8));
  // Drawn after max_batch, for the same reason.
  p.max_unanswered_per_topic =
    static_cast<uint32_t>(gen.chance(1, 2) ? 0 : gen.between(1, 8));
  // Drawn after max_unanswered_per_topic, for the same reason.
  p.touch_ppm =
    static_cast<uint32_t>(gen.chance(1, 2) ? 0 : gen.between(0, 200'000));
  // Drawn after touch_ppm, for the same reason.
  p.clock_jumps =
    static_cast<uint32_t>(gen.chance(1, 2) ? 0 : gen.between(1, 3));
  static constexpr int64_t jump_scales[] = {10'000, 600'000, 7'200'000};
  p.clock_jump_max_ms = jump_scales[gen.pick(std::size(jump_scales))];
  p.clock_drift_ppm = gen.chance(1, 2) ? 0 : gen.between(-1'000, 1'000);
  return p;
}

void sim_params::draw_cluster(prng& gen, uint32_t nodes_asked) {
  nodes =
    nodes_asked > 0 ? nodes_asked : static_cast<uint32_t>(gen.between(3, 5));
  shards = static_cast<uint32_t>(gen.between(nodes, nodes + 3));
  // Shorter and lighter than a run of one engine: N engines cost N times.
  fault_phase_ms = gen.between(10'000, 60'000);
  tasks = static_cast<uint32_t>(gen.between(5, 40));
  revokes = std::min(revokes, tasks / 4);
  reschedules = std::min(reschedules, tasks / 4);
  crashes = static_cast<uint32_t>(gen.between(1, 4));
  map_changes = static_cast<uint32_t>(gen.between(0, 4));
  clock_jumps = 0;
  damage_ppm = 0;
}

std::string sim_params::describe() const {
  std::ostringstream out;
  out << "shards=" << shards << " notifiers=" << notifiers
      << " topics=" << topics << " consumers_per_topic=" << consumers_per_topic
      << " tasks=" << tasks << " revokes=" << revokes
      << " reschedules=" << reschedules << " fault_phase_ms=" << fault_phase_ms
      << " crashes=" << crashes << " disk_faults=" << disk_faults
      << " clock_steps=" << clock_steps << " max_skew_ms=" << max_skew_ms
      << " net_max_delay_ms=" << net_max_delay_ms
      << " net_drop_ppm=" << net_drop_ppm
      << " net_duplicate_ppm=" << net_duplicate_ppm
      << " partitions=" << partitions << " clogs=" << clogs
      << " nack_ppm=" << nack_ppm << " slow_ppm=" << slow_ppm
      << " hang_ppm=" << hang_ppm << " crash_ppm=" << crash_ppm
      << " max_lease_ms=" << max_lease_ms << " max_attempts=" << max_attempts
      << " damage_ppm=" << damage_ppm << " slow_step_ppm=" << slow_step_ppm
      << " slow_step_ms=" << slow_step_ms
      << " max_deferred_index=" << max_deferred_index;
  // Only when set: a seed without batch consumers keeps the event log (and
  // hash) it had before they were drawn.
  if (max_batch > 0)
    out << " max_batch=" << max_batch;
  if (max_unanswered_per_topic > 0)
    out << " max_unanswered_per_topic=" << max_unanswered_per_topic;
  if (touch_ppm > 0)
    out << " touch_ppm=" << touch_ppm;
  if (clock_jumps > 0)
    out << " clock_jumps=" << clock_jumps
        << " clock_jump_max_ms=" << clock_jump_max_ms;
  if (clock_drift_ppm != 0)
    out << " clock_drift_ppm=" << clock_drift_ppm;
  if (nodes > 0)
    out << " nodes=" << nodes << " map_changes=" << map_changes;
  return out.str();
}

// -- the run ------------------------------------------------------------------

namespace {

/// The engine's configuration for the run: the seed's shape, the fault
/// file system, and the simulated wall clock (through the oracle).
void configure_engine(world& w, logic::engine_config& cfg,
                      const std::filesystem::path& data_dir,
                      std::shared_ptr<storage::fault_fs> fs, clock_model& clock,
                      std::string log_prefix) {
  const auto& p = w.params;
  cfg.data_dir = data_dir.string();
  cfg.shard_count = p.shards;
  cfg.notifiers = p.notifiers;
  cfg.durability = storage::durability::sync;
  cfg.write_buffer_bytes = 1 << 20;
  cfg.block_cache_bytes = 1 << 20;
  cfg.max_deferred_index = p.max_deferred_index;
  if (p.max_unanswered_per_topic > 0)
    cfg.max_unanswered_per_topic = p.max_unanswered_per_topic;
  cfg.file_system = std::move(fs);
  cfg.wall_clock_ms = [&w, &clock] {
    auto now = clock.wall_ms(w.true_ms());
    w.checks.clock_read(now);
    return now;
  };
  cfg.log = [&w, log_prefix](const std::string& line) {
    w.event(log_prefix + line);
  };
  plant(w.opts.plant, cfg);
}

/// The fault phase's events, each at a time drawn from the seed.
agenda plan_fault_phase(world& w) {
  const auto& p = w.params;
  agenda out;
  auto at = [&](int64_t offset_ms, std::function<void()> a) {
    out.emplace(t0_ms + offset_ms, std::move(a));
  };
  auto& g = w.work_gen;
  auto span = p.fault_phase_ms;
  for (uint32_t i = 0; i < p.tasks; ++i)
    at(g.between(0, span), [&w] { send_schedule(w, plan_schedule(w), 0); });
  for (uint32_t i = 0; i < p.revokes; ++i)
    at(g.between(0, span), [&w] { send_revoke(w); });
  for (uint32_t i = 0; i < p.reschedules; ++i)
    at(g.between(0, span), [&w] { send_reschedule(w); });
  auto& f = w.fault_gen;
  for (uint32_t i = 0; i < p.crashes; ++i)
    at(f.between(1, span), [&w] { arm_crash(w); });
  for (uint32_t i = 0; i < p.disk_faults; ++i)
    at(f.between(1, span), [&w] { disk_fault(w); });
  for (uint32_t i = 0; i < p.clock_steps; ++i)
    at(f.between(1, span), [&w] { clock_step(w); });
  for (uint32_t i = 0; i < p.partitions; ++i)
    at(f.between(1, span), [&w] { network_fault(w, true); });
  for (uint32_t i = 0; i < p.clogs; ++i)
    at(f.between(1, span), [&w] { network_fault(w, false); });
  for (uint32_t i = 0; i < p.clock_jumps; ++i) {
    auto t = f.between(1, span);
    auto size = f.between(1'000, p.clock_jump_max_ms);
    auto delta = f.chance(1, 2) ? size : -size;
    at(t, [&w, delta] { clock_jump(w, delta); });
    if (f.chance(1, 2)) {
      auto back = std::min(span, t + f.between(1'000, 30'000));
      at(back, [&w, delta] { clock_jump(w, -delta); });
    }
  }
  // Drift: every second the wall clock gains or loses up to 2 ms.
  for (int64_t t = 1'000; t < span; t += 1'000)
    at(t, [&w] {
      std::string where;
      clock_to_move(w, where).shift(w.fault_gen.between(-2, 2));
    });
  // A dead consumer comes back a while later.
  for (int64_t t = 5'000; t < span; t += 5'000)
    at(t, [&w] {
      for (size_t i = 0; i < w.consumers.size(); ++i)
        if (!w.consumers[i].alive && w.fault_gen.chance(1, 2)) {
          w.event("consumer " + std::to_string(i) + " comes back");
          spawn_consumer(w, i);
        }
    });
  at(span, [&w] { heal(w); });
  // The liveness bound, in the runs whose clock jumps and whose disk
  // neither fails nor loses power: after disk faults a shard restarts and
  // recovers at its own pace, which the end check judges.
  bool prompt = p.clock_jumps > 0 && p.disk_faults == 0 && p.crashes == 0;
  for (int64_t t = span + 1'000; prompt && t < span + liveness_span_ms(p);
       t += 1'000)
    at(t, [&w] { check_prompt(w); });
  return out;
}

/// When the liveness phase ends.
int64_t liveness_end_ms(const sim_params& p) {
  return t0_ms + p.fault_phase_ms + liveness_span_ms(p);
}

/// The next timer's time, rounded up to the ms (a timer never fires before
/// its time); INT64_MAX if none.
int64_t next_timer_ms(caf::detail::test_actor_clock& clock) {
  if (!clock.has_pending_timeout())
    return INT64_MAX;
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  auto since = clock.schedule().begin()->first.time_since_epoch();
  auto out = t0_ms + duration_cast<milliseconds>(since).count();
  if (duration_cast<milliseconds>(since) < since)
    ++out;
  return out;
}

void crash_node(world& w, uint32_t index);

/// Carries out an armed power cut once the disk died, or (`idle`) once
/// nothing is left to run; true if one happened.
bool crash_if_cut(world& w, bool idle) {
  if (!w.clustered()) {
    if (!w.crash_pending || (!idle && w.fs->active()))
      return false;
    crash(w);
    return true;
  }
  for (auto& n : w.nodes)
    if (n.crash_pending && (idle || !n.fs->active())) {
      crash_node(w, n.index);
      return true;
    }
  return false;
}

/// Runs the actors, the agenda's events and the timers in true time until
/// `end_ms` or a violation.
void run_until(world& w, agenda& events, int64_t end_ms) {
  const auto& p = w.params;
  auto& clock = w.sched->clock();
  while (!w.failure) {
    if (w.sched->has_job()) {
      if (p.slow_step_ppm > 0 && clock.has_pending_timeout() &&
          w.time_gen.below(1'000'000) < p.slow_step_ppm)
        pass_time_while_working(w, p.slow_step_ms);
      step(w);
      crash_if_cut(w, false);
      continue;
    }
    if (crash_if_cut(w, true))
      continue;
    auto next_timer = next_timer_ms(clock);
    auto next_event = events.empty() ? INT64_MAX : events.begin()->first;
    auto next = std::min(next_timer, next_event);
    if (next == INT64_MAX || next > end_ms)
      break;
    if (next > w.true_ms())
      clock.current_time =
        caf::actor_clock::time_point{std::chrono::milliseconds{next - t0_ms}};
    if (next_event <= next_timer) {
      auto act = std::move(events.begin()->second);
      events.erase(events.begin());
      act();
    } else {
      clock.trigger_timeout();
    }
  }
  if (!w.failure && w.true_ms() < end_ms)
    clock.current_time =
      caf::actor_clock::time_point{std::chrono::milliseconds{end_ms - t0_ms}};
}

/// Stops every actor and timer before the actor system goes.
void shut_down(world& w) {
  w.hung.clear();
  w.hung_batches.clear();
  for (auto& c : w.consumers)
    if (c.handle)
      caf::anon_send_exit(c.handle, caf::exit_reason::user_shutdown);
  if (w.engine)
    caf::anon_send_exit(w.engine, caf::exit_reason::user_shutdown);
  w.engine = nullptr;
  for (auto& n : w.nodes) {
    if (n.engine)
      caf::anon_send_exit(n.engine, caf::exit_reason::user_shutdown);
    n.engine = nullptr;
  }
  drain(w);
  // Timers of dead actors may remain; they go with the system.
  auto& clock = w.sched->clock();
  for (int i = 0; i < 100'000 && clock.has_pending_timeout(); ++i) {
    clock.trigger_timeout();
    drain(w);
  }
}

/// Fills `out` from the finished run.
void report(world& w, sim_result& out) {
  w.event(w.failure ? "failed" : "passed");
  out.hash = w.log.hash_hex();
  out.events = w.log.size();
  out.steps = w.steps;
  out.deliveries = w.checks.deliveries();
  out.acknowledged = w.acknowledged;
  out.restarts = w.restarts;
  out.damaged = w.damaged;
  out.failure = w.failure;
  out.last_events.assign(w.log.last().begin(), w.log.last().end());
}

void simulate(world& w, const std::filesystem::path& data_dir,
              sim_result& out) {
  sim_config caf_cfg;
  caf::actor_system sys{caf_cfg};
  w.sys = &sys;
  w.sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  w.fs = std::make_shared<storage::fault_fs>();
  configure_engine(w, w.cfg, data_dir, w.fs, w.clock, "log: ");
  for (uint32_t t = 0; t < w.params.topics; ++t)
    for (uint32_t c = 0; c < w.params.consumers_per_topic; ++c)
      w.consumers.emplace_back().topic = "t" + std::to_string(t);
  w.event("start " + w.params.describe());
  w.engine = actors::spawn_engine(sys, w.cfg);
  for (size_t i = 0; i < w.consumers.size(); ++i)
    spawn_consumer(w, i);
  auto events = plan_fault_phase(w);
  run_until(w, events, liveness_end_ms(w.params));
  if (!w.failure) {
    w.event("liveness phase over");
    final_checks(w);
  }
  report(w, out);
  shut_down(w);
}

/// A cluster run's own events: Raft ticks, partitions between nodes, map
/// changes in the fault phase, and the convergence check after the heal.
void plan_cluster(world& w, agenda& events) {
  const auto& p = w.params;
  auto span = p.fault_phase_ms;
  auto& g = w.cluster_gen;
  auto partitions = g.between(0, 3);
  for (int64_t i = 0; i < partitions; ++i)
    events.emplace(t0_ms + g.between(1, span), [&w] { partition_nodes(w); });
  for (uint32_t i = 0; i < p.map_changes; ++i)
    events.emplace(t0_ms + g.between(1, span), [&w] { change_map(w); });
  events.emplace(t0_ms + span, [&w, span] {
    watch_convergence(w, t0_ms + span + converge_within_ms);
  });
  schedule_ticks(w, t0_ms + raft_tick_ms, liveness_end_ms(p));
}

/// Sets up a cluster run's nodes: each with its file system, data
/// directory, wall clock, Raft log store and engine configuration.
void make_nodes(world& w, const std::filesystem::path& data_dir) {
  w.history = std::make_unique<raft_history>(
    w.params.shards,
    [&w](const std::string& text) { w.event("raft: " + text); });
  for (uint32_t i = 0; i < w.params.nodes; ++i) {
    auto& n = w.nodes.emplace_back(i, w.params);
    n.fs = std::make_shared<storage::fault_fs>();
    n.log = std::make_unique<cluster::memory_log_store>(cluster::cluster_map{});
    n.mono_offset_ms = w.cluster_gen.between(0, 100'000);
    // Each node's wall clock starts off true time by a skew of its own.
    n.clock.shift(
      w.cluster_gen.between(-w.params.max_skew_ms, w.params.max_skew_ms));
    auto name = "node-" + std::to_string(n.id);
    configure_engine(w, n.cfg, data_dir / name, n.fs, n.clock,
                     node_name(n) + " log: ");
    n.cfg.node_id = n.id;
    n.cfg.open_all_shards = false;
    n.cfg.forward_timeout_ms = forward_timeout_ms;
  }
}

/// A cluster run: N engines and their Raft nodes on one test coordinator;
/// the shard map comes from Raft, each node's engine gets each map its
/// node commits.
void simulate_cluster(world& w, const std::filesystem::path& data_dir,
                      sim_result& out) {
  sim_config caf_cfg;
  caf::actor_system sys{caf_cfg};
  w.sys = &sys;
  w.sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  agenda events;
  w.plan = &events;
  make_nodes(w, data_dir);
  for (uint32_t t = 0; t < w.params.topics; ++t)
    for (uint32_t c = 0; c < w.params.consumers_per_topic; ++c) {
      auto& slot = w.consumers.emplace_back();
      slot.topic = "t" + std::to_string(t);
      slot.home = pick_node(w);
    }
  w.event("start " + w.params.describe());
  for (auto& n : w.nodes) {
    n.engine = actors::spawn_engine(sys, n.cfg);
    start_raft(w, n.index);
  }
  refresh_peers(w);
  for (size_t i = 0; i < w.consumers.size(); ++i)
    spawn_consumer(w, i);
  auto faults = plan_fault_phase(w);
  events.merge(faults);
  plan_cluster(w, events);
  run_until(w, events, liveness_end_ms(w.params));
  if (!w.failure) {
    w.event("liveness phase over");
    final_checks_cluster(w);
  }
  report(w, out);
  shut_down(w);
  w.plan = nullptr;
}

} // namespace

sim_result run_simulation(const sim_options& opts) {
  prng root{opts.seed};
  auto params_gen = root.fork();
  sim_result out;
  out.params = sim_params::draw(params_gen);
  if (opts.cluster || opts.nodes > 0)
    out.params.draw_cluster(params_gen, opts.nodes);
  auto data_dir = make_data_dir(opts);
  {
    world w{opts, out.params, root};
    if (out.params.nodes > 0)
      simulate_cluster(w, data_dir, out);
    else
      simulate(w, data_dir, out);
  }
  std::error_code ec;
  std::filesystem::remove_all(data_dir, ec);
  return out;
}

} // namespace dally::sim
