#pragma once

#include <caf/type_id.hpp>

#include "actors/engine_actor.hpp"
#include "actors/wire.hpp"

// Every type that crosses a process boundary. Registered with
// `actors::add_message_types` (actors/system_setup.hpp); a type missing
// there compiles and then fails at run time.
CAF_BEGIN_TYPE_ID_BLOCK(dally, caf::first_custom_type_id)

CAF_ADD_TYPE_ID(dally, (dally::actors::schedule_request))
CAF_ADD_TYPE_ID(dally, (dally::actors::schedule_reply))
CAF_ADD_TYPE_ID(dally, (dally::actors::schedule_batch_request))
CAF_ADD_TYPE_ID(dally, (dally::actors::schedule_batch_reply))
CAF_ADD_TYPE_ID(dally, (dally::actors::revoke_request))
CAF_ADD_TYPE_ID(dally, (dally::actors::reschedule_request))
CAF_ADD_TYPE_ID(dally, (dally::actors::change_reply))
CAF_ADD_TYPE_ID(dally, (dally::actors::get_request))
CAF_ADD_TYPE_ID(dally, (dally::actors::get_reply))
CAF_ADD_TYPE_ID(dally, (dally::actors::delivery_msg))
CAF_ADD_TYPE_ID(dally, (dally::actors::delivery_reply))
CAF_ADD_TYPE_ID(dally, (dally::actors::subscribe_request))
CAF_ADD_TYPE_ID(dally, (dally::actors::unsubscribe_request))
CAF_ADD_TYPE_ID(dally, (dally::actors::ack_request))
CAF_ADD_TYPE_ID(dally, (dally::actors::nack_request))
CAF_ADD_TYPE_ID(dally, (dally::actors::touch_request))
CAF_ADD_TYPE_ID(dally, (dally::actors::empty_reply))
CAF_ADD_TYPE_ID(dally, (dally::actors::stats_request))
CAF_ADD_TYPE_ID(dally, (dally::actors::stats_reply))
CAF_ADD_TYPE_ID(dally, (dally::actors::dead_letters_request))
CAF_ADD_TYPE_ID(dally, (dally::actors::dead_letters_reply))
CAF_ADD_TYPE_ID(dally, (dally::actors::kick_request))
CAF_ADD_TYPE_ID(dally, (dally::consumer_actor))
CAF_ADD_TYPE_ID(dally, (dally::engine_actor))
CAF_ADD_TYPE_ID(dally, (dally::actors::delivery_batch_msg))
CAF_ADD_TYPE_ID(dally, (dally::actors::delivery_batch_reply))
CAF_ADD_TYPE_ID(dally, (dally::batch_consumer_actor))

CAF_END_TYPE_ID_BLOCK(dally)
