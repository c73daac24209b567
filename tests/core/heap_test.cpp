#define BOOST_TEST_MODULE heap
#include <boost/test/unit_test.hpp>

#include <string>

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
  BOOST_TEST(heap.find("dirty_decay_ms 500, muzzy_decay_ms 0, "
                       "background_thread on") != std::string::npos);
#else
  BOOST_TEST(heap == "C library malloc");
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
  // (AddressSanitizer's allocator refuses mallopt.)
  BOOST_TEST(dally::core::limit_retained_heap());
#endif
#endif
}
