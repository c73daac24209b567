#define BOOST_TEST_MODULE heap
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <sys/types.h>
#include <unistd.h>

#include "runtime/heap_purger.hpp"
#include "runtime/jemalloc_ctl.hpp"
#include "runtime/retained_heap.hpp"

// Built twice: as test_heap on the C library's malloc, and, when the build
// links jemalloc (DALLY_JEMALLOC without sanitizers), as test_heap_jemalloc
// with dally::heap, the way dallyd runs.

BOOST_AUTO_TEST_CASE(reports_the_heap_the_process_runs_on) {
  auto heap = dally::runtime::heap_description();
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
  BOOST_TEST(dally::runtime::limit_retained_heap());
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

/// Switches off the decay of this thread's arena while it lives. Even with
/// the five-second decay, jemalloc's background thread returns part of the
/// freed pages at once (23 to 43 of 64 MiB on a 2-vCPU guest), and a purge
/// that lands while it does so returns nothing: jemalloc 5.3 skips an arena
/// that another thread is purging.
class decay_off {
public:
  decay_off() : ctl_(dally::runtime::find_mallctl()) {
    unsigned arena = 0;
    auto len = sizeof(arena);
    BOOST_REQUIRE(ctl_("thread.arena", &arena, &len, nullptr, 0) == 0);
    arena_ = std::to_string(arena);
    len = sizeof(saved_ms_);
    BOOST_REQUIRE(
      ctl_(name("dirty_decay_ms").c_str(), &saved_ms_, &len, nullptr, 0) == 0);
    ssize_t never = -1;
    BOOST_REQUIRE(ctl_(name("dirty_decay_ms").c_str(), nullptr, nullptr, &never,
                       sizeof(never)) == 0);
  }

  ~decay_off() {
    ctl_(name("dirty_decay_ms").c_str(), nullptr, nullptr, &saved_ms_,
         sizeof(saved_ms_));
  }

  /// Dirty (freed, still resident) pages of the arena, KiB.
  long dirty_kib() const {
    uint64_t epoch = 1;
    auto epoch_len = sizeof(epoch);
    ctl_("epoch", &epoch, &epoch_len, &epoch, epoch_len);
    size_t pages = 0;
    auto len = sizeof(pages);
    auto stat = "stats.arenas." + arena_ + ".pdirty";
    if (ctl_(stat.c_str(), &pages, &len, nullptr, 0) != 0)
      return -1;
    return static_cast<long>(pages * (sysconf(_SC_PAGESIZE) / 1024));
  }

private:
  std::string name(const char* leaf) const {
    return "arena." + arena_ + "." + leaf;
  }

  dally::runtime::mallctl_fn ctl_;
  std::string arena_;
  ssize_t saved_ms_ = 0;
};

} // namespace
#endif

BOOST_AUTO_TEST_CASE(the_purge_hands_freed_pages_back) {
  auto purge = dally::runtime::heap_purger::process_hooks().purge;
#if defined(DALLY_EXPECT_JEMALLOC)
  BOOST_TEST(dally::runtime::heap_purger::available());
  decay_off no_decay;
  // 64 MiB in 1 MiB blocks (as RocksDB's write buffers take them), touched
  // and freed: with no decay they stay resident, as dirty pages, until the
  // purge.
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
  BOOST_TEST(no_decay.dirty_kib() >= 64 * 1024);
  BOOST_TEST(purge());
  auto after = rss_kib();
  BOOST_TEST_MESSAGE("RSS " << before << " KiB before the purge, " << after
                            << " KiB after");
  BOOST_TEST(before - after > 60 * 1024);
  BOOST_TEST(no_decay.dirty_kib() == 0);
#else
  BOOST_TEST(!dally::runtime::heap_purger::available());
  BOOST_TEST(!purge());
#endif
}
