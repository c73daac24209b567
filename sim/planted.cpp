#include "sim/planted.hpp"

#include <algorithm>
#include <array>
#include <utility>
#include <variant>

namespace dally::sim {

namespace {

struct bug_name {
  planted_bug bug;
  const char* name;
};

constexpr bug_name names[] = {
  {planted_bug::none, "none"},
  {planted_bug::fire_early, "fire-early"},
  {planted_bug::lose_ack, "lose-ack"},
  {planted_bug::deliver_after_revoke, "deliver-after-revoke"},
  {planted_bug::nack_deletes, "nack-deletes"},
  {planted_bug::at_early, "at-early"},
  {planted_bug::recurrence_early, "recurrence-early"},
  {planted_bug::ack_skips_next, "ack-skips-next"},
  {planted_bug::expiry_keeps_attempt, "expiry-keeps-attempt"},
  {planted_bug::duplicate_id, "duplicate-id"},
  {planted_bug::touch_shortens_lease, "touch-shortens-lease"},
  {planted_bug::grab_shard, "grab-shard"},
};

constexpr auto bugs = [] {
  std::array<planted_bug, std::size(names)> out{};
  for (size_t i = 0; i < std::size(names); ++i)
    out[i] = names[i].bug;
  return out;
}();

/// Wraps every shard's store, as `cfg` opens it, in a `Store`.
template<class Store>
void wrap_stores(logic::engine_config& cfg) {
  cfg.open_store = [open = cfg.open_store](const storage::store_options& opts)
    -> core::result<std::unique_ptr<storage::task_store>> {
    auto inner = logic::open_shard_store(open, opts);
    if (!inner)
      return inner.err();
    return std::unique_ptr<storage::task_store>{
      std::make_unique<Store>(std::move(*inner))};
  };
}

/// Gives every shard of `cfg` the life cycle `Lifecycle`.
template<class Lifecycle>
void use_lifecycle(logic::engine_config& cfg) {
  cfg.shard.lifecycle = std::make_shared<Lifecycle>();
}

} // namespace

std::span<const planted_bug> planted_bugs() {
  return bugs;
}

std::optional<planted_bug> parse_planted(const std::string& name) {
  for (const auto& n : names)
    if (name == n.name)
      return n.bug;
  return std::nullopt;
}

std::string planted_name(planted_bug bug) {
  for (const auto& n : names)
    if (n.bug == bug)
      return n.name;
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
      return wrap_stores<store_losing_first_put>(cfg);
    case planted_bug::deliver_after_revoke:
      return use_lifecycle<lifecycle_keeping_revoked>(cfg);
    case planted_bug::nack_deletes:
      return use_lifecycle<lifecycle_nack_deleting>(cfg);
    case planted_bug::at_early:
      return use_lifecycle<lifecycle_at_early>(cfg);
    case planted_bug::recurrence_early:
      return use_lifecycle<lifecycle_recurrence_early>(cfg);
    case planted_bug::ack_skips_next:
      return use_lifecycle<lifecycle_ack_skipping_next>(cfg);
    case planted_bug::expiry_keeps_attempt:
      return use_lifecycle<lifecycle_expiry_keeping_attempt>(cfg);
    case planted_bug::duplicate_id:
      return wrap_stores<store_reusing_first_id>(cfg);
    case planted_bug::touch_shortens_lease:
      return use_lifecycle<lifecycle_touch_shortening>(cfg);
    case planted_bug::grab_shard:
      return; // Planted in the simulator's cluster glue, not the engine.
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

core::error store_reusing_first_id::commit(const storage::write_batch& batch) {
  using put_op = storage::write_batch::put_op;
  auto err = inner().commit(batch);
  if (!err && first_)
    for (const auto& op : batch.ops())
      if (const auto* put = std::get_if<put_op>(&op);
          put != nullptr && put->rec.task.id == *first_)
        stored_ = true;
  return err;
}

bool store_reusing_first_id::first_gone() {
  if (!stored_)
    return false;
  auto rec = inner().get(*first_);
  auto dead = inner().get_dead(*first_);
  return rec && !*rec && dead && !*dead;
}

core::task_id store_reusing_first_id::allocate_id() {
  if (!spent_ && first_gone()) {
    spent_ = true;
    return *first_;
  }
  auto id = inner().allocate_id();
  if (!first_)
    first_ = id;
  return id;
}

core::transition
lifecycle_nack_deleting::nack(core::task_record& rec, int64_t now_ms,
                              std::optional<int64_t> retry_in_ms) const {
  if (rec.task.recurrence.is_periodic())
    return task_lifecycle::nack(rec, now_ms, retry_in_ms);
  return core::transition::removed();
}

std::optional<int64_t> lifecycle_at_early::first_due(const core::task& t,
                                                     int64_t now_ms) const {
  auto due = task_lifecycle::first_due(t, now_ms);
  if (due && t.recurrence.kind() == core::recurrence_kind::at)
    *due -= 500;
  return due;
}

core::transition lifecycle_recurrence_early::ack(core::task_record& rec,
                                                 int64_t now_ms) const {
  auto out = task_lifecycle::ack(rec, now_ms);
  if (out.what == core::transition::kind::keep)
    rec.task.due_ms -= 700;
  return out;
}

core::transition lifecycle_ack_skipping_next::ack(core::task_record&,
                                                  int64_t) const {
  return core::transition::removed();
}

core::transition
lifecycle_expiry_keeping_attempt::expire_lease(core::task_record& rec,
                                               int64_t now_ms) const {
  auto out = task_lifecycle::expire_lease(rec, now_ms);
  if (out.what == core::transition::kind::keep && rec.task.attempt > 0)
    --rec.task.attempt;
  return out;
}

void lifecycle_touch_shortening::touch(core::task_record& rec, int64_t now_ms,
                                       int64_t extend_ms) const {
  task_lifecycle::touch(rec, now_ms, extend_ms);
  rec.lease_deadline_ms = now_ms + (rec.lease_deadline_ms - now_ms) / 2;
}

} // namespace dally::sim
