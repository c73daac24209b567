// Compiled into dallyd and the benchmarks when they link jemalloc
// (DALLY_JEMALLOC): jemalloc reads this symbol at start-up. Unused pages go
// back to the OS half a second after they were freed, by a background
// thread, so RSS follows the pending tasks instead of the largest burst so
// far. The environment's MALLOC_CONF still overrides it.

extern "C" {

/// jemalloc's options; see docs/operations.md.
extern const char* malloc_conf;
const char* malloc_conf =
  "dirty_decay_ms:500,muzzy_decay_ms:0,background_thread:true";
}
