#pragma once

#include <cstdint>

#include "core/result.hpp"
#include "core/task.hpp"
#include "core/task_record.hpp"
#include "logic/engine_config.hpp"
#include "proto/dally_api.pb.h"

namespace dally::logic {

/// Builds a task from a client's request at `now_ms`: resolves the
/// recurrence (RecurrenceSpec unset: once, at once), takes the request's
/// policy or `opts.default_policy` when the request has none, asks the
/// shard's life cycle for the first due time, and validates everything
/// against `opts.limits`. Errors: those of the recurrence factories and
/// task::validate, invalid_request for an unknown kind, no_occurrence for a
/// recurrence without one.
core::result<core::task> to_task(const v1::ScheduleRequest& req, int64_t now_ms,
                                 const shard_options& opts);

/// As above, moving the request's topic and payload out instead of copying.
core::result<core::task> to_task(v1::ScheduleRequest&& req, int64_t now_ms,
                                 const shard_options& opts);

/// A record as the wire carries it (to_proto of storage's codec).
v1::TaskRecord to_wire(const core::task_record& rec);

} // namespace dally::logic
