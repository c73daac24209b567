#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/task_lifecycle.hpp"
#include "logic/engine_config.hpp"
#include "storage/task_store.hpp"

namespace dally::sim {

/// Bugs planted on purpose, for the simulator's self-test: it must catch
/// each (see docs/simulation.md). Each goes in through a seam the engine
/// offers for wrapping what it is given (the wall clock, the store opener,
/// the task life cycle), never through a branch in what dallyd runs.
enum class planted_bug : uint8_t {
  none,
  /// The engine's wall clock reads 1 ms ahead: tasks fire 1 ms early.
  fire_early,
  /// The first task each shard's store is asked to put is acknowledged and
  /// never stored.
  lose_ack,
  /// The first revoke of a pending task answers done and removes nothing.
  deliver_after_revoke,
  /// A nack of a one-shot task removes it instead of retrying it.
  nack_deletes,
  /// A task scheduled `at` a time is due 500 ms before it.
  at_early,
  /// Every occurrence of a recurrence after the first is due 700 ms early.
  recurrence_early,
  /// An ack of a recurrence's occurrence ends the task: the next
  /// occurrence is never armed.
  ack_skips_next,
  /// A lease that runs out gives its attempt back: the redelivery repeats
  /// the attempt, and a task no consumer answers is never dead-lettered.
  expiry_keeps_attempt,
  /// Each shard's store hands out its first task id again once that task
  /// is gone (an id reused, as by a counter rebuilt from the live ids).
  duplicate_id,
  /// A touch sets the lease to half what it asked for.
  touch_shortens_lease,
  /// In a cluster run (dally-sim --nodes), the first node's glue hands its
  /// engine each committed map with one more shard given to that node (the
  /// lowest it does not own): a node serving a shard the map gave another.
  /// The engine's configuration is untouched.
  grab_shard,
};

/// Every bug, none included, in the order of the enum.
std::span<const planted_bug> planted_bugs();

/// The name of a planted bug on the command line, and back.
std::optional<planted_bug> parse_planted(const std::string& name);
std::string planted_name(planted_bug bug);

/// Plants `bug` in the engine `cfg` describes (its wall clock set).
void plant(planted_bug bug, logic::engine_config& cfg);

/// A wall clock that reads `ahead_ms` ahead of `inner`.
std::function<int64_t()> clock_ahead(std::function<int64_t()> inner,
                                     int64_t ahead_ms);

/// A store that hands every call to another: the base of a store with a
/// planted bug, which overrides only what it breaks.
class forwarding_store : public storage::task_store {
public:
  explicit forwarding_store(std::unique_ptr<storage::task_store> inner);

  core::error commit(const storage::write_batch& batch) override;
  core::error sync_if_due(int64_t now_ms) override;
  bool sync_pending() const noexcept override;
  core::error sync() override;
  core::error index_deferred() override;
  core::error write_failure() const override;
  core::task_id allocate_id() override;
  core::result<std::optional<storage::task_record>>
  get(core::task_id id) override;
  core::result<std::vector<storage::task_record>>
  get_many(std::span<const core::task_id> ids) override;
  core::result<std::vector<storage::due_key>>
  scan_due(storage::due_key after, int64_t before_ms, size_t limit) override;
  core::result<std::optional<storage::idempotency_entry>>
  find_key(std::string_view key, int64_t now_ms) override;
  core::result<size_t> expire_keys(int64_t now_ms, size_t limit) override;
  core::result<std::vector<storage::dead_letter>>
  dead_letters(core::task_id after, size_t limit) override;
  core::result<std::optional<storage::dead_letter>>
  get_dead(core::task_id id) override;
  const storage::shard_meta& meta() const noexcept override;
  core::error set_epoch(uint64_t epoch) override;
  void raise_fire_horizon(int64_t horizon_ms) override;
  const std::vector<storage::quarantined_record>& quarantined() const override;
  storage::store_stats stats() const override;

protected:
  storage::task_store& inner() noexcept { return *inner_; }

private:
  std::unique_ptr<storage::task_store> inner_;
};

/// lose-ack: commits every batch but leaves out the first task put it
/// sees; the schedule is answered as if it had been stored.
class store_losing_first_put final : public forwarding_store {
public:
  using forwarding_store::forwarding_store;

  core::error commit(const storage::write_batch& batch) override;

private:
  bool spent_ = false;
};

/// duplicate-id: hands out the first id it allocated a second time, once
/// the task it named was stored and is gone again (removed, not a dead
/// letter), so that no record or tracked delivery of the shard clashes
/// with it: only clients can tell.
class store_reusing_first_id final : public forwarding_store {
public:
  using forwarding_store::forwarding_store;

  core::error commit(const storage::write_batch& batch) override;
  core::task_id allocate_id() override;

private:
  /// Whether the task of the first id is gone from the store.
  bool first_gone();

  std::optional<core::task_id> first_;
  bool stored_ = false;
  bool spent_ = false;
};

/// deliver-after-revoke: the first revoke of a pending task keeps the task
/// as it is, so the shard answers done and the task still fires. One
/// instance serves every shard of a run (the simulator runs on one
/// thread), so the bug acts once per run.
class lifecycle_keeping_revoked final : public core::task_lifecycle {
public:
  core::transition revoke(core::task_record& rec) const override;

private:
  mutable bool spent_ = false;
};

/// nack-deletes: a one-shot task's nack removes it.
class lifecycle_nack_deleting final : public core::task_lifecycle {
public:
  core::transition nack(core::task_record& rec, int64_t now_ms,
                        std::optional<int64_t> retry_in_ms) const override;
};

/// at-early: a task asked for at a time is due 500 ms before it.
class lifecycle_at_early final : public core::task_lifecycle {
public:
  std::optional<int64_t> first_due(const core::task& t,
                                   int64_t now_ms) const override;
};

/// recurrence-early: the occurrence an ack arms is due 700 ms early.
class lifecycle_recurrence_early final : public core::task_lifecycle {
public:
  core::transition ack(core::task_record& rec, int64_t now_ms) const override;
};

/// ack-skips-next: an ack removes the task even when an occurrence is left.
class lifecycle_ack_skipping_next final : public core::task_lifecycle {
public:
  core::transition ack(core::task_record& rec, int64_t now_ms) const override;
};

/// expiry-keeps-attempt: a lease that runs out takes the attempt back.
class lifecycle_expiry_keeping_attempt final : public core::task_lifecycle {
public:
  core::transition expire_lease(core::task_record& rec,
                                int64_t now_ms) const override;
};

/// touch-shortens-lease: a touch's lease runs half as long as asked.
class lifecycle_touch_shortening final : public core::task_lifecycle {
public:
  void touch(core::task_record& rec, int64_t now_ms,
             int64_t extend_ms) const override;
};

} // namespace dally::sim
