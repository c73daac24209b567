#pragma once

#include <string>
#include <type_traits>

#include <caf/detail/stringification_inspector.hpp>
#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>

#include "proto/dally_api.pb.h"

namespace dally::net {

/// A protobuf message as a CAF message: CAF serializes it as its protobuf
/// bytes, so clients and nodes of different versions interoperate (unknown
/// fields are skipped, missing ones take their defaults). Every message the
/// public interfaces exchange is one of these.
template<class Proto>
struct wire {
  Proto pb;

  wire() = default;

  explicit wire(Proto x) : pb(std::move(x)) {
    // nop
  }
};

/// Writes the protobuf bytes; reading refuses bytes that do not parse.
template<class Inspector, class Proto>
typename Inspector::result_type inspect(Inspector& f, wire<Proto>& x) {
  if constexpr (std::is_same_v<Inspector,
                               caf::detail::stringification_inspector>) {
    return f(caf::meta::type_name(Proto::descriptor()->name().c_str()),
             x.pb.ShortDebugString());
  } else if constexpr (Inspector::reads_state) {
    std::string bytes = x.pb.SerializeAsString();
    return f(bytes);
  } else {
    std::string bytes;
    auto parse = caf::meta::load_callback([&]() -> caf::error {
      if (!x.pb.ParseFromString(bytes))
        return caf::make_error(caf::sec::invalid_argument,
                               "malformed protobuf " +
                                 Proto::descriptor()->full_name());
      return caf::none;
    });
    return f(bytes, parse);
  }
}

using schedule_request = wire<v1::ScheduleRequest>;
using schedule_reply = wire<v1::ScheduleReply>;
using schedule_batch_request = wire<v1::ScheduleBatchRequest>;
using schedule_batch_reply = wire<v1::ScheduleBatchReply>;
using revoke_request = wire<v1::RevokeRequest>;
using reschedule_request = wire<v1::RescheduleRequest>;
using change_reply = wire<v1::ChangeReply>;
using get_request = wire<v1::GetRequest>;
using get_reply = wire<v1::GetReply>;
using delivery_msg = wire<v1::Delivery>;
using delivery_reply = wire<v1::DeliveryReply>;
using delivery_batch_msg = wire<v1::DeliveryBatch>;
using delivery_batch_reply = wire<v1::DeliveryBatchReply>;
using subscribe_request = wire<v1::SubscribeRequest>;
using unsubscribe_request = wire<v1::UnsubscribeRequest>;
using ack_request = wire<v1::AckRequest>;
using nack_request = wire<v1::NackRequest>;
using touch_request = wire<v1::TouchRequest>;
using empty_reply = wire<v1::Empty>;
using stats_request = wire<v1::StatsRequest>;
using stats_reply = wire<v1::StatsReply>;
using dead_letters_request = wire<v1::DeadLettersRequest>;
using dead_letters_reply = wire<v1::DeadLettersReply>;
using kick_request = wire<v1::KickRequest>;
using cluster_map_request = wire<v1::ClusterMapRequest>;
using cluster_map_reply = wire<v1::ClusterMapReply>;

/// Wraps `pb` without copying the type name at every call site.
template<class Proto>
wire<Proto> make_wire(Proto pb) {
  return wire<Proto>{std::move(pb)};
}

} // namespace dally::net
