#pragma once

#include <cstdint>

#include "core/error.hpp"
#include "core/task.hpp"
#include "storage/store_options.hpp"

namespace dally::storage {

/// Ways a stored task record can be wrong while RocksDB's own checksums
/// still pass: bytes a faulty writer (an older version, bad memory before
/// the checksum) put there. Each one is detectable by decoding alone.
enum class record_damage : uint8_t {
  /// Bytes that do not parse as protobuf.
  garbage,
  /// A record that parses but whose state is unspecified.
  invalid_field,
  /// A well-formed record of another task id under this id's key.
  wrong_id,
};

/// Rewrites the record of task `id` in the closed store at `opts.path`
/// (through `opts.file_system` when set), synced: for the simulator and
/// tests of the quarantine. Errors: not_found if the store holds no
/// record of `id`; io_error if RocksDB fails.
core::error damage_task_record(const store_options& opts, core::task_id id,
                               record_damage how);

} // namespace dally::storage
