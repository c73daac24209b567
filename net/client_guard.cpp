#include "net/client_guard.hpp"

#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/to_string.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "net/error.hpp"
#include "net/owning_actor.hpp"
#include "net/type_ids.hpp"

namespace dally::net {

namespace {

struct client_guard_state {
  static inline const char* name = "dally.client_guard";

  engine_actor node;
  uint64_t max_message_bytes = 0;
  /// Requests sent to the node and not yet answered, by a sequence number:
  /// how to fail each one if the connection drops first.
  std::unordered_map<uint64_t, std::function<void(const caf::error&)>> waiting;
  uint64_t next_seq = 0;
};

using guard_actor = owning_actor<client_guard_state, engine_actor::base>*;

/// Sends `req` (and `extra`, a consumer) on to the node and answers the
/// caller with whatever comes back, or refuses it here if it is too large
/// for the node to read.
template<class Reply, class Request, class... Extra>
caf::typed_response_promise<Reply> forward(guard_actor self, Request& req,
                                           Extra&... extra) {
  auto& st = self->state;
  auto rp = self->template make_response_promise<Reply>();
  auto bytes = static_cast<uint64_t>(req.pb.ByteSizeLong());
  if (bytes + client_framing_bytes > st.max_message_bytes) {
    rp.deliver(make_caf_error(
      core::errc::request_too_large,
      "the request is " + std::to_string(bytes) + " bytes; with " +
        std::to_string(client_framing_bytes) +
        " bytes for framing it exceeds the node's message limit of " +
        std::to_string(st.max_message_bytes) +
        " bytes (dallyd --max-message-bytes); it was not sent"));
    return rp;
  }
  auto seq = st.next_seq++;
  st.waiting.emplace(seq,
                     [rp](const caf::error& err) mutable { rp.deliver(err); });
  self->request(st.node, caf::infinite, std::move(req), extra...)
    .then(
      [self, rp, seq](Reply& reply) mutable {
        self->state.waiting.erase(seq);
        rp.deliver(std::move(reply));
      },
      [self, rp, seq](caf::error& err) mutable {
        self->state.waiting.erase(seq);
        rp.deliver(std::move(err));
      });
  return rp;
}

engine_actor::behavior_type client_guard(guard_actor self, engine_actor node,
                                         uint64_t max_message_bytes) {
  auto& st = self->state;
  st.node = std::move(node);
  st.max_message_bytes = max_message_bytes;
  self->monitor(st.node);
  self->set_down_handler([self](caf::down_msg& msg) {
    auto& st = self->state;
    if (msg.source != st.node.address())
      return;
    auto err = make_caf_error(core::errc::unavailable,
                              "the connection to the node was lost (" +
                                caf::to_string(msg.reason) + ")");
    auto waiting = std::move(st.waiting);
    st.waiting.clear();
    for (auto& [seq, fail] : waiting)
      fail(err);
    self->quit(msg.reason);
  });
  return {
    [self](schedule_request& req) {
      return forward<schedule_reply>(self, req);
    },
    [self](schedule_batch_request& req) {
      return forward<schedule_batch_reply>(self, req);
    },
    [self](revoke_request& req) { return forward<change_reply>(self, req); },
    [self](reschedule_request& req) {
      return forward<change_reply>(self, req);
    },
    [self](get_request& req) { return forward<get_reply>(self, req); },
    [self](subscribe_request& req, consumer_actor& consumer) {
      return forward<empty_reply>(self, req, consumer);
    },
    [self](subscribe_request& req, batch_consumer_actor& consumer) {
      return forward<empty_reply>(self, req, consumer);
    },
    [self](unsubscribe_request& req, consumer_actor& consumer) {
      return forward<empty_reply>(self, req, consumer);
    },
    [self](ack_request& req) { return forward<empty_reply>(self, req); },
    [self](nack_request& req) { return forward<empty_reply>(self, req); },
    [self](touch_request& req) { return forward<empty_reply>(self, req); },
    [self](stats_request& req) { return forward<stats_reply>(self, req); },
    [self](dead_letters_request& req) {
      return forward<dead_letters_reply>(self, req);
    },
    [self](kick_request& req) { return forward<change_reply>(self, req); },
    [self](cluster_map_request& req) {
      return forward<cluster_map_reply>(self, req);
    },
  };
}

/// Whether `guard` has begun to exit: CAF marks an actor cleaned up before
/// it tells its monitors and runs its attached functors.
bool has_exited(const engine_actor& guard) {
  auto* ptr = caf::actor_cast<caf::abstract_actor*>(guard);
  return ptr->getf(caf::abstract_actor::is_cleaned_up_flag) ||
         ptr->getf(caf::abstract_actor::is_terminated_flag);
}

/// The running stand-ins, so that `client_guard_for` hands one out again.
/// An entry goes when its stand-in exits.
class guard_registry {
public:
  engine_actor get_or_spawn(caf::actor_system& sys, engine_actor node,
                            uint64_t max_message_bytes) {
    engine_actor spawned;
    uint64_t id = 0;
    {
      std::lock_guard<std::mutex> guard{lock_};
      for (auto& e : entries_) {
        if (e.sys != &sys || e.node != node.address() ||
            e.max_message_bytes != max_message_bytes)
          continue;
        // Its exit erases the entry, but only after the down messages went
        // out: one who saw a stand-in go down must not get it back.
        auto running = caf::actor_cast<engine_actor>(e.guard);
        if (running && !has_exited(running))
          return running;
      }
      // Hidden: the middleman keeps every actor that sent a message to a
      // node registered, so the stand-in would outlive its last handle and
      // the actor_system's destructor would wait for it forever. It ends
      // when the middleman closes its connection, at the latest when the
      // system stops.
      auto node_addr = node.address();
      spawned = sys.spawn<caf::hidden>(client_guard, std::move(node),
                                       max_message_bytes);
      id = next_id_++;
      entries_.push_back(
        {id, &sys, std::move(node_addr), max_message_bytes, spawned.address()});
    }
    // Outside the lock: a stand-in that already exited runs it at once.
    caf::actor_cast<caf::abstract_actor*>(spawned)->attach_functor(
      [this, id] { erase(id); });
    return spawned;
  }

private:
  struct entry {
    uint64_t id;
    caf::actor_system* sys;
    caf::actor_addr node;
    uint64_t max_message_bytes;
    caf::actor_addr guard;
  };

  void erase(uint64_t id) {
    std::lock_guard<std::mutex> guard{lock_};
    std::erase_if(entries_, [id](const entry& e) { return e.id == id; });
  }

  std::mutex lock_;
  std::vector<entry> entries_;
  uint64_t next_id_ = 0;
};

} // namespace

engine_actor client_guard_for(caf::actor_system& sys, engine_actor node,
                              uint64_t max_message_bytes) {
  // Never destroyed: stand-ins of systems still running at exit erase
  // their entries as they go down, after static destructors would have run.
  static auto* registry = new guard_registry;
  return registry->get_or_spawn(sys, std::move(node), max_message_bytes);
}

} // namespace dally::net
