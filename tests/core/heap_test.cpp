#define BOOST_TEST_MODULE heap
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/heap_purger.hpp"
#include "core/retained_heap.hpp"

// Built twice: as test_heap on the C library's malloc, and, when the build
// links jemalloc (DALLY_JEMALLOC without sanitizers), as test_heap_jemalloc
// with dally::heap, the way dallyd runs.

BOOST_AUTO_TEST_CASE(reports_the_heap_the_process_runs_on) {
  auto heap = dally::core::heap_description();
  BOOST_TEST_MESSAGE("heap: " << heap);
#if defined(DALLY_EXPECT_JEMALLOC)
  BOOST_TEST(heap.rfind("jemalloc ", 0) == 0u);
  // The options of core/jemalloc_conf.cpp took effect.
  BOOST_TEST(heap.find("dirty_decay_ms 5000, muzzy_decay_ms 0, "
                       "background_thread on") != std::string::npos);
#else
  BOOST_TEST(heap == "C library malloc");
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
  // (AddressSanitizer's allocator refuses mallopt.)
  BOOST_TEST(dally::core::limit_retained_heap());
#endif
#endif
}

#if defined(DALLY_EXPECT_JEMALLOC)
namespace {

/// VmRSS of this process, KiB.
long rss_kib() {
  std::ifstream in{"/proc/self/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::atol(line.c_str() + 6);
  return -1;
}

} // namespace
#endif

BOOST_AUTO_TEST_CASE(the_purge_hands_freed_pages_back) {
  auto purge = dally::core::heap_purger::process_hooks().purge;
#if defined(DALLY_EXPECT_JEMALLOC)
  BOOST_TEST(dally::core::heap_purger::available());
  // 64 MiB in 1 MiB blocks (as RocksDB's write buffers take them), touched
  // and freed: the long decay keeps them resident until the purge.
  std::vector<char*> blocks;
  for (int i = 0; i < 64; ++i) {
    auto* b = static_cast<char*>(std::malloc(1 << 20));
    for (size_t k = 0; k < (1 << 20); k += 4096)
      b[k] = 1;
    blocks.push_back(b);
  }
  for (auto* b : blocks)
    std::free(b);
  auto before = rss_kib();
  BOOST_TEST(purge());
  auto after = rss_kib();
  BOOST_TEST_MESSAGE("RSS " << before << " KiB before the purge, " << after
                            << " KiB after");
  BOOST_TEST(before - after > 32 * 1024);
#else
  BOOST_TEST(!dally::core::heap_purger::available());
  BOOST_TEST(!purge());
#endif
}
