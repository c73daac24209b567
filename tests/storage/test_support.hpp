#pragma once

// Helpers shared by the storage fault and crash suites.

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <system_error>

#include <stdlib.h>

#include "core/result.hpp"

namespace dally::storage::test {

/// A fresh, uniquely named directory under the system temp dir (mkdtemp),
/// removed with everything in it on destruction.
class temp_dir {
public:
  temp_dir() {
    auto tmpl =
      (std::filesystem::temp_directory_path() / "dally-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw std::system_error(errno, std::generic_category(), "mkdtemp");
    path_ = tmpl;
  }

  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }

  /// The directory, or `sub` inside it, as a string.
  std::string str(const std::string& sub = {}) const {
    return sub.empty() ? path_.string() : (path_ / sub).string();
  }

private:
  std::filesystem::path path_;
};

/// The error in `res`, printable; the message of a passing check is
/// built too, so it must not touch a missing error.
template<class T>
std::string error_of(const dally::core::result<T>& res) {
  if (res)
    return "no error";
  std::ostringstream out;
  out << res.err();
  return out.str();
}

/// SplitMix64: a seeded, portable source of test decisions (no floating
/// point, the same sequence on every platform).
class prng {
public:
  explicit prng(uint64_t seed) : state_(seed) {
    // nop
  }

  uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ull;
    auto z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  /// Uniform enough in [0, n) for n far below 2^64.
  uint64_t below(uint64_t n) { return next() % n; }

  /// In [lo, hi].
  uint64_t between(uint64_t lo, uint64_t hi) { return lo + below(hi - lo + 1); }

private:
  uint64_t state_;
};

} // namespace dally::storage::test
