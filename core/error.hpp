#pragma once

#include <ostream>
#include <string>
#include <utility>

#include "core/errc.hpp"

namespace dally::core {

/// Prints the enumerator's name (for logs and test failures).
inline std::ostream& operator<<(std::ostream& out, errc code) {
  return out << to_string(code);
}

/// An error value: a code to branch on and a message for people. Core code
/// never throws for bad input; it returns one of these.
class error {
public:
  error() = default;

  error(errc code, std::string message)
    : code_(code), message_(std::move(message)) {
    // nop
  }

  errc code() const noexcept { return code_; }

  const std::string& message() const noexcept { return message_; }

  explicit operator bool() const noexcept { return code_ != errc::none; }

  friend bool operator==(const error& x, const error& y) noexcept {
    return x.code_ == y.code_;
  }

  friend std::ostream& operator<<(std::ostream& out, const error& x) {
    return out << to_string(x.code_) << ": " << x.message_;
  }

private:
  errc code_ = errc::none;
  std::string message_;
};

} // namespace dally::core
