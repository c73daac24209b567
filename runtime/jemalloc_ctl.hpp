#pragma once

#include <cstddef>

namespace dally::runtime {

/// jemalloc's `mallctl`, the one door to its settings and statistics.
using mallctl_fn = int (*)(const char*, void*, size_t*, void*, size_t);

/// The process's `mallctl`, looked up at run time, or nullptr when the
/// C library's malloc serves: the same code runs with either allocator
/// (the sanitizer builds have no jemalloc).
mallctl_fn find_mallctl();

} // namespace dally::runtime
