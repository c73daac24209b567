#pragma once

#include <cassert>
#include <utility>
#include <variant>

#include "core/error.hpp"

namespace dally::core {

/// A value or an error, for the CAF-free core (the actor layer converts it
/// to `caf::expected`). Deliberately small: C++20 has no std::expected.
template<class T>
class result {
public:
  result(T value) : data_(std::move(value)) {
    // nop
  }

  result(error err) : data_(std::move(err)) {
    assert(std::get<error>(data_).code() != errc::none);
  }

  bool has_value() const noexcept { return data_.index() == 0; }

  explicit operator bool() const noexcept { return has_value(); }

  T& value() & {
    assert(has_value());
    return std::get<T>(data_);
  }

  const T& value() const& {
    assert(has_value());
    return std::get<T>(data_);
  }

  T&& value() && {
    assert(has_value());
    return std::get<T>(std::move(data_));
  }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const error& err() const {
    assert(!has_value());
    return std::get<error>(data_);
  }

private:
  std::variant<T, error> data_;
};

} // namespace dally::core
