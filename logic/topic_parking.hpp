#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <absl/container/flat_hash_map.h>

#include "core/timer_entry.hpp"
#include "storage/due_window.hpp"
#include "storage/task_record.hpp"

namespace dally::logic {

/// Topic parking: a shard fires only what a topic's consumers can take.
/// Due tasks of a topic without a consumer, or with
/// `max_unanswered` deliveries fired and unanswered, are parked here in
/// memory instead of being fired (no attempt spent, nothing written), and
/// go back into the due window when the topic can take them again. Beyond
/// `max_in_memory` parked entries the latest are dropped from memory (they
/// stay on disk) and the window is reloaded from the store once their
/// topic takes deliveries again (`reload_pending`).
class topic_parking {
public:
  struct options {
    /// Unanswered deliveries per topic at which it saturates; 0: no cap.
    size_t max_unanswered = 0;
    /// Most entries put back per release (one fire pass pops no more).
    size_t fire_batch = 1024;
    /// Most parked entries in memory.
    size_t max_in_memory = 1;
  };

  explicit topic_parking(options opts) : opts_(opts) {}

  /// Whether due tasks of `name` may fire now: a consumer can take them
  /// and the topic is below its cap.
  bool open(const std::string& name) const {
    auto it = topics_.find(name);
    return it != topics_.end() && it->second.available && !it->second.saturated;
  }

  /// Whether `name` has a consumer (saturated or not).
  bool available(const std::string& name) const {
    auto it = topics_.find(name);
    return it != topics_.end() && it->second.available;
  }

  /// Counts `id` as an unanswered delivery of `topic` (once).
  void count_in_flight(core::task_id id, const std::string& topic);

  /// `id` is no longer in flight; its topic reopens at half its cap,
  /// putting parked entries back into `window`.
  void uncount_in_flight(core::task_id id, storage::due_window& window);

  /// Parks the due entry `key` of a task of `topic`.
  void park(const storage::due_key& key, const std::string& topic);

  /// Drops the parked entry of `id`, if any (its record changed).
  void unpark(core::task_id id);

  /// Whether a due task popped now could only be parked: no topic is
  /// open, and deliveries fired to some topic are unanswered, so an answer
  /// (or its lease expiry) or a topic's announcement reopens one. Popping
  /// the due window then only reads records and parks them: a shard behind
  /// on a saturated topic did that for its whole backlog, over and over,
  /// and got slower the further behind it was.
  bool only_parks() const noexcept {
    return open_topics_ == 0 && topics_in_flight_ > 0;
  }

  /// Whether any entry is parked in memory.
  bool any_parked() const noexcept { return !parked_index_.empty(); }

  /// Whether `name` has a consumer. Making one available puts its parked
  /// entries back into `window`.
  void set_available(const std::string& name, bool available,
                     storage::due_window& window);

  /// A fire pass begins: a topic releases parked entries once per pass.
  void begin_pass() noexcept { ++fire_passes_; }

  /// After a pass's pops: the releases that waited for it.
  void release_deferred(storage::due_window& window);

  /// Whether a release waits for the next pass.
  bool release_waiting() const noexcept { return !deferred_releases_.empty(); }

  /// Whether entries dropped from memory wait for a reload of the window.
  bool reload_pending() const noexcept { return reload_pending_; }

  /// The window is reloaded from the store: every parked entry comes back
  /// from there, so parking starts over.
  void reset();

  /// Parked entries per topic, those dropped from memory included.
  std::map<std::string, uint64_t> waiting() const;

private:
  /// Parked entries of one topic and whether a consumer can take them.
  struct topic_state {
    std::string name;
    bool available = false;
    /// Deliveries fired and not yet answered (staged fires included).
    uint64_t in_flight = 0;
    /// At max_unanswered: parks like an unavailable topic until half of
    /// its deliveries have been answered.
    bool saturated = false;
    /// Entries dropped from memory since the last reload (still due).
    uint64_t dropped = 0;
    /// Parked index entries, earliest due first.
    std::set<storage::due_key> parked;
    /// The fire pass of the last release (at most one per pass), and
    /// whether a release waits for the next pass.
    uint64_t released_in_pass = std::numeric_limits<uint64_t>::max();
    bool release_deferred = false;
  };

  topic_state& topic(const std::string& name);
  void set_state(topic_state& ts, bool available, bool saturated) noexcept;
  void release_parked(topic_state& ts, storage::due_window& window);

  options opts_;
  /// Topics known to have a consumer, or with parked entries.
  std::unordered_map<std::string, topic_state> topics_;
  /// The topic of each task in flight (its count is in topic_state).
  absl::flat_hash_map<core::task_id, topic_state*> in_flight_topics_;
  absl::flat_hash_map<core::task_id, std::pair<topic_state*, storage::due_key>>
    parked_index_;
  /// Fire passes so far.
  uint64_t fire_passes_ = 0;
  /// Topics whose release waits for the next fire pass.
  std::vector<std::string> deferred_releases_;
  bool reload_pending_ = false;
  /// Topics that are available and not saturated, and topics with
  /// deliveries in flight.
  size_t open_topics_ = 0;
  size_t topics_in_flight_ = 0;
};

} // namespace dally::logic
