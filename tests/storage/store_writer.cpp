// dally-store-writer: commits batches of new tasks to a store in sync mode,
// forever, and prints each committed id once its commit returned (after a
// first line "opening", printed before it opens the store). The
// storage_kill test SIGKILLs it at random points and then checks that every
// id it printed survived.
//
//   dally-store-writer --dir PATH [--seed N] [--max-ms N]
//
// Task contents follow from the id (see kill_test.cpp), so the test can tell
// a damaged record from an intact one.

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>

#include <unistd.h>

#include "core/recurrence.hpp"
#include "storage/rocks_task_store.hpp"
#include "storage/store_options.hpp"
#include "storage/write_batch.hpp"

namespace {

constexpr int64_t t0_ms = 1'700'000'000'000;

/// Writes all of `text` to stdout with write(2): one call per batch keeps a
/// batch's lines together in the pipe (they fit in PIPE_BUF).
bool emit(const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(STDOUT_FILENO, text.data() + done, text.size() - done);
    if (n < 0)
      return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

int usage() {
  std::cerr << "usage: dally-store-writer --dir PATH [--seed N] [--max-ms N]\n";
  return 64;
}

} // namespace

int main(int argc, char** argv) {
  std::string dir;
  uint64_t seed = 1;
  int64_t max_ms = 20'000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string_view arg{argv[i]};
    if (arg == "--dir")
      dir = argv[i + 1];
    else if (arg == "--seed")
      seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (arg == "--max-ms")
      max_ms = std::strtoll(argv[i + 1], nullptr, 10);
    else
      return usage();
  }
  if (dir.empty() || argc % 2 != 1)
    return usage();
  dally::storage::store_options opts;
  opts.path = dir;
  opts.shard = 0;
  opts.shard_count = 1;
  opts.durability = dally::storage::durability::sync;
  // Small memtables, so kills also land in flushes.
  opts.write_buffer_bytes = 256 << 10;
  opts.block_cache_bytes = 1 << 20;
  // Tells the test that the store is about to open, so that it can aim
  // kills at recovery as well as at the commit loop.
  if (!emit("opening\n"))
    return 3;
  auto store = dally::storage::rocks_task_store::open(opts);
  if (!store) {
    std::cerr << "dally-store-writer: open failed: " << store.err() << '\n';
    return 2;
  }
  auto start = std::chrono::steady_clock::now();
  auto state = seed;
  for (;;) {
    if (std::chrono::steady_clock::now() - start >
        std::chrono::milliseconds{max_ms})
      return 0;
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    auto count = 1 + (state >> 33) % 16;
    dally::storage::write_batch batch;
    std::string acks;
    for (uint64_t i = 0; i < count; ++i) {
      dally::storage::task_record rec;
      rec.task.id = (*store)->allocate_id();
      rec.task.topic = "kill";
      rec.task.payload = "dally-kill-" + std::to_string(rec.task.id);
      rec.task.due_ms = t0_ms + static_cast<int64_t>(rec.task.id);
      rec.task.recurrence =
        dally::core::recurrence::at(rec.task.due_ms).value();
      acks += std::to_string(rec.task.id);
      acks += '\n';
      batch.put(std::move(rec));
    }
    if (auto err = (*store)->commit(batch)) {
      std::cerr << "dally-store-writer: commit failed: " << err << '\n';
      return 2;
    }
    if (!emit(acks))
      return 3;
  }
}
