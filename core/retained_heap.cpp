#include "core/retained_heap.hpp"

#include <climits>
#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace dally::core {

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

} // namespace dally::core
