// Compiled into dallyd and the benchmarks when they link jemalloc
// (DALLY_JEMALLOC): jemalloc reads this symbol at start-up. Unused pages go
// back to the OS five seconds after they were freed, by a background
// thread: long enough that under load RocksDB's next write buffer and the
// next batches reuse them instead of faulting in fresh pages, which cost
// about 5% of dallyd's CPU with half a second. Once the process goes idle,
// runtime::heap_purger returns them at once, so an idle node's RSS follows
// its pending tasks. The environment's MALLOC_CONF still overrides it.

extern "C" {

/// jemalloc's options; see docs/operations.md.
extern const char* malloc_conf;
const char* malloc_conf =
  "dirty_decay_ms:5000,muzzy_decay_ms:0,background_thread:true";
}
