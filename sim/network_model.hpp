#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <vector>

#include "sim/prng.hpp"

namespace dally::sim {

/// One direction between two simulated endpoints (clients, nodes).
struct link_id {
  uint32_t from = 0;
  uint32_t to = 0;

  friend auto operator<=>(const link_id&, const link_id&) = default;
};

/// How a link misbehaves. Rates are per million messages, so that every
/// decision is an integer draw.
struct link_faults {
  int64_t min_delay_ms = 0;
  int64_t max_delay_ms = 0;
  uint32_t drop_per_million = 0;
  uint32_t duplicate_per_million = 0;
};

/// The simulated network's decisions, free of CAF: when a message sent on
/// a link arrives (never, once, or twice), from the link's faults and the
/// seed. A partitioned link drops what is sent while it is cut; a clogged
/// one holds what is sent on it until the clog ends (what is already on its
/// way still arrives). Arrivals on one link keep their send
/// order, as messages between two CAF actors do; a duplicate arrives right
/// after its original.
class network_model {
public:
  /// Links without faults of their own use `defaults`.
  explicit network_model(prng gen, link_faults defaults = {});

  void set_faults(link_id link, link_faults faults);

  /// Cuts `link` (one direction) until `heal`.
  void partition(link_id link);

  void heal(link_id link);

  /// Heals every partition and ends every clog.
  void heal_all();

  /// Holds what is sent on `link` until `until_ms`.
  void clog(link_id link, int64_t until_ms);

  bool partitioned(link_id link) const;

  /// Arrival times of a message sent on `link` at `now_ms`: none when it
  /// is dropped, two when it is duplicated, each at or after `now_ms`.
  std::vector<int64_t> send(link_id link, int64_t now_ms);

private:
  struct link_state {
    bool has_faults = false;
    link_faults faults;
    bool cut = false;
    int64_t clogged_until_ms = 0;
    /// The latest arrival so far, which later ones may not precede.
    int64_t last_arrival_ms = 0;
  };

  prng gen_;
  link_faults defaults_;
  std::map<link_id, link_state> links_;
};

} // namespace dally::sim
