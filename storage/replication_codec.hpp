#pragma once

#include "core/error.hpp"
#include "core/result.hpp"
#include "proto/dally.pb.h"
#include "storage/write_batch.hpp"

namespace dally::storage {

// The one codec between a store's commits and ReplicationEntry
// (proto/dally.proto): what a primary ships to its replicas. A store
// reports each commit it wrote to `store_options::on_commit`; `to_entry`
// turns that into an entry; a replica decodes it with `from_entry` and
// writes it with `rocks_task_store::apply`, the store's commit path. The
// entries of a store's history, applied in order to an empty store, give
// the same store: records, due index, keys, dead letters, quarantine, meta.

/// Encodes what a commit wrote: every op of the batch with the store's
/// decisions (each put's deferral, the index entries written after the
/// ops), the stamp range, the meta after and urgency. Each record carries
/// the stamp the commit gave it. Errors: those of the records' to_proto
/// (text that is not valid UTF-8), which a committed batch never has.
core::error to_entry(const committed_batch& batch, v1::ReplicationEntry& out);

/// Decodes an entry for `rocks_task_store::apply`. Errors: corrupt_record
/// for an op or record that does not decode, a missing field, or a stamp
/// range that does not match the ops and the meta; store_unavailable for
/// a meta of a format newer than this build reads.
core::result<replicated_batch> from_entry(const v1::ReplicationEntry& in);

} // namespace dally::storage
