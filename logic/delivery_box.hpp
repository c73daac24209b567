#pragma once

#include <memory>
#include <utility>

#include "proto/dally_api.pb.h"

namespace dally::logic {

/// A fired delivery on the heap. On its way from a shard's commit to a
/// consumer's batch it passes the hold, the release queue, the
/// notifier_logic's queue and the notifier's batches; moving a protobuf
/// message costs a default construction and a swap of all its fields at
/// each of them, moving this costs a pointer. A batch consumer's message
/// then adopts the delivery without another allocation (`release`).
/// Copies are deep: CAF's message types must be copyable, but the engine
/// only moves them. A moved-from box is empty and may only be assigned
/// to or destroyed.
class delivery_box {
public:
  delivery_box() : ptr_(std::make_unique<v1::Delivery>()) {
    // nop
  }

  explicit delivery_box(v1::Delivery d)
    : ptr_(std::make_unique<v1::Delivery>(std::move(d))) {
    // nop
  }

  delivery_box(const delivery_box& other)
    : ptr_(std::make_unique<v1::Delivery>(*other.ptr_)) {
    // nop
  }

  delivery_box& operator=(const delivery_box& other) {
    if (this != &other)
      ptr_ = std::make_unique<v1::Delivery>(*other.ptr_);
    return *this;
  }

  delivery_box(delivery_box&&) noexcept = default;

  delivery_box& operator=(delivery_box&&) noexcept = default;

  v1::Delivery& operator*() noexcept { return *ptr_; }

  const v1::Delivery& operator*() const noexcept { return *ptr_; }

  v1::Delivery* operator->() noexcept { return ptr_.get(); }

  const v1::Delivery* operator->() const noexcept { return ptr_.get(); }

  /// Hands the delivery over, e.g. to a repeated field's AddAllocated;
  /// the box is empty afterwards.
  v1::Delivery* release() noexcept { return ptr_.release(); }

private:
  std::unique_ptr<v1::Delivery> ptr_;
};

} // namespace dally::logic
