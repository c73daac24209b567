#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>

namespace dally::logic {

/// Gives `x` its default value in place, freeing what it held. `x = T{}`
/// would first zero-fill a temporary (value-initialization): a `rep stos`
/// over the whole record, most of what clearing a batch's staged entries
/// cost.
template<class T>
void reset_in_place(T& x) noexcept {
  static_assert(std::is_nothrow_default_constructible_v<T>);
  std::destroy_at(&x);
  ::new (static_cast<void*>(&x)) T;
}

/// Empties a flat table that every batch fills again, keeping its array:
/// abseil's clear() frees an array of more than 127 slots, and the next
/// batch would grow it from nothing, rehashing at every doubling. A table
/// a rare huge batch grew beyond `kept_slots` is freed all the same.
template<class Table>
void clear_for_reuse(Table& table) {
  constexpr size_t kept_slots = 8192;
  if (table.capacity() <= 127 || table.capacity() > kept_slots)
    table.clear();
  else
    table.erase(table.begin(), table.end());
}

} // namespace dally::logic
