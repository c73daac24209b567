#include "sim/planted.hpp"

#include <algorithm>
#include <utility>
#include <variant>

namespace dally::sim {

std::optional<planted_bug> parse_planted(const std::string& name) {
  for (auto bug : {planted_bug::none, planted_bug::fire_early,
                   planted_bug::lose_ack, planted_bug::deliver_after_revoke})
    if (planted_name(bug) == name)
      return bug;
  return std::nullopt;
}

std::string planted_name(planted_bug bug) {
  switch (bug) {
    case planted_bug::none:
      return "none";
    case planted_bug::fire_early:
      return "fire-early";
    case planted_bug::lose_ack:
      return "lose-ack";
    case planted_bug::deliver_after_revoke:
      return "deliver-after-revoke";
  }
  return "none";
}

void plant(planted_bug bug, logic::engine_config& cfg) {
  switch (bug) {
    case planted_bug::none:
      return;
    case planted_bug::fire_early:
      cfg.wall_clock_ms = clock_ahead(cfg.wall_clock_ms, 1);
      return;
    case planted_bug::lose_ack:
      cfg.open_store = [open =
                          cfg.open_store](const storage::store_options& opts)
        -> core::result<std::unique_ptr<storage::task_store>> {
        auto inner = logic::open_shard_store(open, opts);
        if (!inner)
          return inner.err();
        return std::unique_ptr<storage::task_store>{
          std::make_unique<store_losing_first_put>(std::move(*inner))};
      };
      return;
    case planted_bug::deliver_after_revoke:
      cfg.shard.lifecycle = std::make_shared<lifecycle_keeping_revoked>();
      return;
  }
}

std::function<int64_t()> clock_ahead(std::function<int64_t()> inner,
                                     int64_t ahead_ms) {
  return [inner = std::move(inner), ahead_ms] { return inner() + ahead_ms; };
}

// -- forwarding_store ---------------------------------------------------------

forwarding_store::forwarding_store(std::unique_ptr<storage::task_store> inner)
  : inner_(std::move(inner)) {
  // nop
}

core::error forwarding_store::commit(const storage::write_batch& batch) {
  return inner_->commit(batch);
}

core::error forwarding_store::sync_if_due(int64_t now_ms) {
  return inner_->sync_if_due(now_ms);
}

bool forwarding_store::sync_pending() const noexcept {
  return inner_->sync_pending();
}

core::error forwarding_store::sync() {
  return inner_->sync();
}

core::error forwarding_store::index_deferred() {
  return inner_->index_deferred();
}

core::error forwarding_store::write_failure() const {
  return inner_->write_failure();
}

core::task_id forwarding_store::allocate_id() {
  return inner_->allocate_id();
}

core::result<std::optional<storage::task_record>>
forwarding_store::get(core::task_id id) {
  return inner_->get(id);
}

core::result<std::vector<storage::task_record>>
forwarding_store::get_many(std::span<const core::task_id> ids) {
  return inner_->get_many(ids);
}

core::result<std::vector<storage::due_key>>
forwarding_store::scan_due(storage::due_key after, int64_t before_ms,
                           size_t limit) {
  return inner_->scan_due(after, before_ms, limit);
}

core::result<std::optional<storage::idempotency_entry>>
forwarding_store::find_key(std::string_view key, int64_t now_ms) {
  return inner_->find_key(key, now_ms);
}

core::result<size_t> forwarding_store::expire_keys(int64_t now_ms,
                                                   size_t limit) {
  return inner_->expire_keys(now_ms, limit);
}

core::result<std::vector<storage::dead_letter>>
forwarding_store::dead_letters(core::task_id after, size_t limit) {
  return inner_->dead_letters(after, limit);
}

core::result<std::optional<storage::dead_letter>>
forwarding_store::get_dead(core::task_id id) {
  return inner_->get_dead(id);
}

const storage::shard_meta& forwarding_store::meta() const noexcept {
  return inner_->meta();
}

core::error forwarding_store::set_epoch(uint64_t epoch) {
  return inner_->set_epoch(epoch);
}

void forwarding_store::raise_fire_horizon(int64_t horizon_ms) {
  inner_->raise_fire_horizon(horizon_ms);
}

const std::vector<storage::quarantined_record>&
forwarding_store::quarantined() const {
  return inner_->quarantined();
}

storage::store_stats forwarding_store::stats() const {
  return inner_->stats();
}

// -- the planted bugs ---------------------------------------------------------

core::error store_losing_first_put::commit(const storage::write_batch& batch) {
  using put_op = storage::write_batch::put_op;
  const auto& ops = batch.ops();
  auto put = std::find_if(ops.begin(), ops.end(), [](const auto& op) {
    return std::holds_alternative<put_op>(op);
  });
  if (spent_ || put == ops.end())
    return inner().commit(batch);
  spent_ = true;
  storage::write_batch rest;
  rest.set_urgent(batch.urgent());
  for (auto it = ops.begin(); it != ops.end(); ++it)
    if (it != put)
      rest.ops().push_back(*it);
  return inner().commit(rest);
}

core::transition
lifecycle_keeping_revoked::revoke(core::task_record& rec) const {
  if (spent_ || rec.state != core::task_state::pending)
    return task_lifecycle::revoke(rec);
  spent_ = true;
  return core::transition::kept();
}

} // namespace dally::sim
