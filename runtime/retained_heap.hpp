#pragma once

#include <cstddef>
#include <string>

namespace dally::runtime {

/// Makes the C library return freed heap memory to the OS once `bytes` are
/// free at the top of a heap. glibc's default threshold starts at 128 KiB
/// and grows with the largest block freed, up to 64 MiB per heap, so after
/// a burst of schedule requests a process keeps tens of MiB it no longer
/// uses (measured: 89 instead of 54 bytes of RSS per pending task). dallyd
/// calls it at start; an embedding application may. Process-wide; returns
/// false where the C library has no such setting.
bool limit_retained_heap(size_t bytes = size_t{1} << 20);

/// Which allocator the process runs on and how it returns memory, for logs
/// and benchmark reports: jemalloc (found at run time, linked or preloaded)
/// with its version and decay settings, else the C library's malloc.
std::string heap_description();

} // namespace dally::runtime
