#include "runtime/jemalloc_ctl.hpp"

#include <dlfcn.h>

namespace dally::runtime {

mallctl_fn find_mallctl() {
  // jemalloc exports mallctl; glibc does not.
  return reinterpret_cast<mallctl_fn>(dlsym(RTLD_DEFAULT, "mallctl"));
}

} // namespace dally::runtime
