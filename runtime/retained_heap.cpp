#include "runtime/retained_heap.hpp"

#include <climits>
#include <cstdlib>
#include <string>
#include <sys/types.h>

#include "runtime/jemalloc_ctl.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace dally::runtime {

bool limit_retained_heap(size_t bytes) {
#if defined(__GLIBC__)
  if (bytes > static_cast<size_t>(INT_MAX))
    bytes = static_cast<size_t>(INT_MAX);
  return mallopt(M_TRIM_THRESHOLD, static_cast<int>(bytes)) == 1;
#else
  static_cast<void>(bytes);
  return false;
#endif
}

namespace {

template<class T>
bool read_ctl(mallctl_fn ctl, const char* name, T& out) {
  auto len = sizeof(T);
  return ctl(name, &out, &len, nullptr, 0) == 0 && len == sizeof(T);
}

} // namespace

std::string heap_description() {
  auto* ctl = find_mallctl();
  if (ctl == nullptr)
    return "C library malloc";
  const char* version = nullptr;
  ssize_t dirty_ms = 0;
  ssize_t muzzy_ms = 0;
  bool background = false;
  std::string out = "jemalloc";
  if (read_ctl(ctl, "version", version) && version != nullptr)
    out += std::string{" "} + version;
  if (read_ctl(ctl, "opt.dirty_decay_ms", dirty_ms) &&
      read_ctl(ctl, "opt.muzzy_decay_ms", muzzy_ms) &&
      read_ctl(ctl, "opt.background_thread", background))
    out += " (dirty_decay_ms " + std::to_string(dirty_ms) +
           ", muzzy_decay_ms " + std::to_string(muzzy_ms) +
           ", background_thread " + (background ? "on" : "off") + ")";
  return out;
}

} // namespace dally::runtime
