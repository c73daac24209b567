#pragma once

#include <caf/atom.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "net/wire.hpp"

namespace dally {

/// A consumer of one or more topics. It answers each delivery with a verdict:
/// ack, nack (retry later) or later (it settles through the engine's ack,
/// nack or touch before the lease ends). An answer may be deferred with a
/// response promise, as long as it comes before the lease deadline.
using consumer_actor = caf::typed_actor<
  caf::replies_to<net::delivery_msg>::with<net::delivery_reply>>;

/// A consumer that also takes deliveries in batches: the engine sends it
/// up to its subscription's `max_batch` deliveries in one message and it
/// answers them all at once, which costs the node one request, one answer
/// and one timer per batch instead of per delivery. It is a consumer_actor
/// too (a delivery may still come alone).
using batch_consumer_actor = caf::typed_actor<
  caf::replies_to<net::delivery_msg>::with<net::delivery_reply>,
  caf::replies_to<net::delivery_batch_msg>::with<net::delivery_batch_reply>>;

/// The engine's public interface, the same embedded and remote. Every
/// request is answered with its reply or a `caf::error` whose category is
/// `dally` and whose code is a `core::errc` (see actors/error.hpp).
///
/// Replies to requests that change tasks come only once the change is
/// durable at the node's durability level.
using engine_actor = caf::typed_actor<
  caf::replies_to<net::schedule_request>::with<net::schedule_reply>,
  caf::replies_to<net::schedule_batch_request>::with<net::schedule_batch_reply>,
  caf::replies_to<net::revoke_request>::with<net::change_reply>,
  caf::replies_to<net::reschedule_request>::with<net::change_reply>,
  caf::replies_to<net::get_request>::with<net::get_reply>,
  caf::replies_to<net::subscribe_request,
                  consumer_actor>::with<net::empty_reply>,
  caf::replies_to<net::subscribe_request,
                  batch_consumer_actor>::with<net::empty_reply>,
  caf::replies_to<net::unsubscribe_request,
                  consumer_actor>::with<net::empty_reply>,
  caf::replies_to<net::ack_request>::with<net::empty_reply>,
  caf::replies_to<net::nack_request>::with<net::empty_reply>,
  caf::replies_to<net::touch_request>::with<net::empty_reply>,
  caf::replies_to<net::stats_request>::with<net::stats_reply>,
  caf::replies_to<net::dead_letters_request>::with<net::dead_letters_reply>,
  caf::replies_to<net::kick_request>::with<net::change_reply>,
  caf::replies_to<net::cluster_map_request>::with<net::cluster_map_reply>>;

/// Prefixes a request that one node's engine forwards to the engine of the
/// node owning the request's shard, as `(forwarded_atom, request)` with the
/// request's own reply. The receiver serves it from its own shards only and
/// never forwards it again: a shard it does not run is `unavailable` (two
/// nodes holding different shard maps would otherwise pass it back and
/// forth). Subscriptions forwarded so subscribe the consumer at that node
/// only.
using forwarded_atom = caf::atom_constant<caf::atom("forwarded")>;

} // namespace dally
