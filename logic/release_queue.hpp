#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "logic/delivery_box.hpp"
#include "logic/delivery_hold.hpp"
#include "proto/dally_api.pb.h"

namespace dally::logic {

/// A fired delivery on its way to consumers: durable as in flight, it goes
/// out at `release_ms` (its due time) unless its shard cancels `hold`
/// first.
struct held_delivery {
  delivery_box delivery;
  int64_t release_ms = 0;
  std::shared_ptr<delivery_hold> hold;
};

/// The deliveries a notifier holds until they are due, so that releasing
/// them on time never waits for a shard that is busy committing or
/// scheduling. Free of CAF: the notifier asks when to wake up and what is
/// due then.
class release_queue {
public:
  /// Adds `item`; items due at the same ms go out in the order added.
  void push(held_delivery item);

  /// The earliest release time; INT64_MAX when empty.
  int64_t next_release_ms() const noexcept;

  /// Claims and returns the deliveries due at `now_ms`, in release order,
  /// stamped as fired at `now_ms`; those their shard cancelled are dropped.
  std::vector<delivery_box> pop_due(int64_t now_ms);

  /// Items held, cancelled ones included until their release time.
  size_t size() const noexcept { return size_; }

  bool empty() const noexcept { return size_ == 0; }

private:
  /// By release ms: the items due then, in the order added. Releases come
  /// in rough due order, so a bucket per ms keeps pushes cheap.
  std::map<int64_t, std::vector<held_delivery>> buckets_;
  static constexpr size_t bucket_reserve = 8;
  size_t size_ = 0;
};

} // namespace dally::logic
