#pragma once

#include <caf/type_id.hpp>

#include "net/engine_actor.hpp"
#include "net/wire.hpp"

// Every type that crosses a process boundary. Registered with
// `runtime::add_message_types` (actors/system_setup.hpp); a type missing
// there compiles and then fails at run time.
CAF_BEGIN_TYPE_ID_BLOCK(dally, caf::first_custom_type_id)

CAF_ADD_TYPE_ID(dally, (dally::net::schedule_request))
CAF_ADD_TYPE_ID(dally, (dally::net::schedule_reply))
CAF_ADD_TYPE_ID(dally, (dally::net::schedule_batch_request))
CAF_ADD_TYPE_ID(dally, (dally::net::schedule_batch_reply))
CAF_ADD_TYPE_ID(dally, (dally::net::revoke_request))
CAF_ADD_TYPE_ID(dally, (dally::net::reschedule_request))
CAF_ADD_TYPE_ID(dally, (dally::net::change_reply))
CAF_ADD_TYPE_ID(dally, (dally::net::get_request))
CAF_ADD_TYPE_ID(dally, (dally::net::get_reply))
CAF_ADD_TYPE_ID(dally, (dally::net::delivery_msg))
CAF_ADD_TYPE_ID(dally, (dally::net::delivery_reply))
CAF_ADD_TYPE_ID(dally, (dally::net::subscribe_request))
CAF_ADD_TYPE_ID(dally, (dally::net::unsubscribe_request))
CAF_ADD_TYPE_ID(dally, (dally::net::ack_request))
CAF_ADD_TYPE_ID(dally, (dally::net::nack_request))
CAF_ADD_TYPE_ID(dally, (dally::net::touch_request))
CAF_ADD_TYPE_ID(dally, (dally::net::empty_reply))
CAF_ADD_TYPE_ID(dally, (dally::net::stats_request))
CAF_ADD_TYPE_ID(dally, (dally::net::stats_reply))
CAF_ADD_TYPE_ID(dally, (dally::net::dead_letters_request))
CAF_ADD_TYPE_ID(dally, (dally::net::dead_letters_reply))
CAF_ADD_TYPE_ID(dally, (dally::net::kick_request))
CAF_ADD_TYPE_ID(dally, (dally::consumer_actor))
CAF_ADD_TYPE_ID(dally, (dally::engine_actor))
CAF_ADD_TYPE_ID(dally, (dally::net::delivery_batch_msg))
CAF_ADD_TYPE_ID(dally, (dally::net::delivery_batch_reply))
CAF_ADD_TYPE_ID(dally, (dally::batch_consumer_actor))
CAF_ADD_TYPE_ID(dally, (dally::net::cluster_map_request))
CAF_ADD_TYPE_ID(dally, (dally::net::cluster_map_reply))

CAF_END_TYPE_ID_BLOCK(dally)
