#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <absl/container/flat_hash_map.h>

#include "core/task_record.hpp"
#include "core/timer_entry.hpp"
#include "logic/reuse.hpp"
#include "storage/task_record.hpp"
#include "storage/write_batch.hpp"

namespace dally::logic {

/// What the current batch did to a task: the overlay that lets reads see
/// staged writes.
struct staged_entry {
  enum class kind : uint8_t { live, erased, dead };
  kind what = kind::live;
  /// live: the staged record; dead: the buried one.
  core::task_record rec;
  /// The task's index entry in the store before this batch, if it had
  /// one: the entry a rollback hands back to the window.
  std::optional<storage::due_key> base;
  int64_t dead_ms = 0;
  std::string dead_reason;
};

/// A task's current record as a request or a fire found it: staged (in
/// the overlay) or freshly read from the store.
struct record_slot {
  /// The live record, or null.
  core::task_record* rec = nullptr;
  /// The overlay entry, if the batch touched the task.
  staged_entry* entry = nullptr;
  /// The store's index entry for the task before this batch.
  std::optional<storage::due_key> base;
};

/// Group commit: a shard stages every change since its last commit here,
/// as one write batch that the next commit makes durable at once (one
/// write, one fsync), and reads its tasks through the batch's overlay, so
/// that the answers of one batch agree with one another before it is
/// written. A failed commit hands back what the batch took from the due
/// window (`consumed`).
class staged_batch {
public:
  // -- the overlay ------------------------------------------------------------

  staged_entry* find(core::task_id id) { return overlay_.find(id); }
  const staged_entry* find(core::task_id id) const { return overlay_.find(id); }
  bool contains(core::task_id id) const { return overlay_.contains(id); }

  /// Fills `out` from the batch's entry of `id`; false if it has none.
  bool find(core::task_id id, record_slot& out) {
    auto* entry = overlay_.find(id);
    if (entry == nullptr)
      return false;
    out.entry = entry;
    out.base = entry->base;
    if (entry->what == staged_entry::kind::live)
      out.rec = &entry->rec;
    return true;
  }

  /// Calls `f(id, entry)` for every staged entry, read-only.
  template<class F>
  void for_each(F&& f) const {
    overlay_.for_each(std::forward<F>(f));
  }

  // -- staging ----------------------------------------------------------------

  /// Makes the overlay own the slot's record (moving it out of where the
  /// slot found it) without staging a write.
  staged_entry& own(record_slot& s);

  /// Stages the slot's (modified) record, which was at `before`.
  void replace(record_slot& s, const storage::due_key& before);

  void erase(record_slot& s);

  void bury(record_slot& s, int64_t now_ms, std::string reason);

  /// Stages a new task.
  void put(core::task_record rec);

  /// Stages `rec` as its revived dead letter; `entry` is its overlay entry
  /// when the batch buried it.
  void revive(core::task_record rec, staged_entry* entry);

  void put_key(std::string key, storage::idempotency_entry entry) {
    batch_.put_key(std::move(key), entry);
  }

  /// `key`, taken from the window or the backlog, was acted upon in this
  /// batch: a failed commit hands it back.
  void consume(const storage::due_key& key) { consumed_.push_back(key); }

  const std::vector<storage::due_key>& consumed() const noexcept {
    return consumed_;
  }

  /// Nothing was staged after all: nothing to hand back either.
  void forget_consumed() { consumed_.clear(); }

  // -- the batch --------------------------------------------------------------

  bool empty() const noexcept { return batch_.empty(); }

  /// The writes, to commit (and to move committed records out of).
  storage::write_batch& writes() noexcept { return batch_; }
  const storage::write_batch& writes() const noexcept { return batch_; }

  /// The dead letters with id > `after` of a page the store listed (with
  /// `revived_from_store()` more than the caller needs), as the batch
  /// leaves them: what it revived goes, what it buried comes, in id order.
  void overlay_dead(std::vector<storage::dead_letter>& page,
                    core::task_id after) const;

  /// Whether the batch buried or revived a task.
  bool has_dead_changes() const noexcept { return has_dead_changes_; }

  /// Dead letters of the store that the batch revived.
  size_t revived_from_store() const noexcept { return revived_from_store_; }

  /// Forgets everything staged (after a commit, or its failure).
  void clear();

private:
  /// The batch's staged entries by task. Entries keep their address until
  /// clear() (slots point at them across inserts) and are reused by the
  /// batches after: a node map allocated a node per staged task, about
  /// three per task delivered (its put, its fire, its ack).
  class overlay {
  public:
    staged_entry* find(core::task_id id) {
      auto it = index_.find(id);
      return it == index_.end() ? nullptr : it->second;
    }

    const staged_entry* find(core::task_id id) const {
      auto it = index_.find(id);
      return it == index_.end() ? nullptr : it->second;
    }

    bool contains(core::task_id id) const { return index_.contains(id); }

    /// The entry of `id`, default-constructed if the batch had none.
    staged_entry& operator[](core::task_id id) {
      auto [it, added] = index_.try_emplace(id, nullptr);
      if (added) {
        if (used_ == pool_.size())
          pool_.push_back(std::make_unique<staged_entry>());
        it->second = pool_[used_++].get();
      }
      return *it->second;
    }

    void clear();

    template<class F>
    void for_each(F&& f) const {
      for (const auto& [id, entry] : index_)
        f(id, static_cast<const staged_entry&>(*entry));
    }

  private:
    static constexpr size_t kept_entries = 4096;
    absl::flat_hash_map<core::task_id, staged_entry*> index_;
    std::vector<std::unique_ptr<staged_entry>> pool_;
    size_t used_ = 0;
  };

  storage::write_batch batch_;
  overlay overlay_;
  /// Store-held entries taken from the window or the backlog and acted
  /// upon in this batch: a rollback hands them back.
  std::vector<storage::due_key> consumed_;
  /// Dead letters of the store revived in this batch.
  size_t revived_from_store_ = 0;
  bool has_dead_changes_ = false;
};

} // namespace dally::logic
