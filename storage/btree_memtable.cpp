#include "storage/btree_memtable.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <absl/container/btree_set.h>
#include <rocksdb/slice.h>

namespace dally::storage {

namespace {

using key_comparator = rocksdb::MemTableRep::KeyComparator;

/// RocksDB's internal keys end in 8 bytes of sequence number and type.
constexpr size_t internal_suffix_bytes = 8;

/// RocksDB's largest sequence number (56 bits; the low byte of an internal
/// key's suffix is the value type).
constexpr uint64_t max_sequence = (uint64_t{1} << 56) - 1;

/// User keys longer than this many bytes are ordered by the comparator
/// once their inline prefixes tie.
constexpr size_t inline_key_bytes = 8;

struct entry {
  /// The first 8 bytes of the user key as a big-endian number, zero-padded:
  /// ordering by it agrees with bytewise order wherever two prefixes differ
  /// (a tie, e.g. "ab" and "ab\0", goes to `rank`).
  uint64_t prefix;
  /// The user key's length (capped at 9, "longer than the prefix") in the
  /// top byte, then the sequence number inverted: for keys of up to 8
  /// bytes, (prefix, rank) is the whole of RocksDB's order (user key
  /// ascending, sequence descending). An ack's tombstone thus finds its
  /// place beside its put without reading the put's key from the arena,
  /// a likely cache miss this long after the put.
  uint64_t rank;
  /// The memtable entry: length-prefixed internal key, then the value.
  const char* data;
};

entry make_entry(const rocksdb::Slice& internal_key, const char* data) {
  auto size = internal_key.size() >= internal_suffix_bytes
                ? internal_key.size() - internal_suffix_bytes
                : 0;
  uint64_t prefix = 0;
  for (size_t i = 0; i < inline_key_bytes; ++i) {
    prefix <<= 8;
    if (i < size)
      prefix |= static_cast<unsigned char>(internal_key.data()[i]);
  }
  uint64_t sequence = 0;
  if (internal_key.size() >= internal_suffix_bytes) {
    // The suffix is a little-endian fixed64 of (sequence << 8 | type).
    const auto* suffix =
      reinterpret_cast<const unsigned char*>(internal_key.data() + size);
    for (size_t i = internal_suffix_bytes; i-- > 1;)
      sequence = (sequence << 8) | suffix[i];
  }
  auto length = static_cast<uint64_t>(std::min(size, inline_key_bytes + 1));
  return entry{prefix, (length << 56) | (max_sequence - sequence), data};
}

/// Whether an entry's user key lies wholly in its prefix.
bool inline_key(const entry& e) {
  return (e.rank >> 56) <= inline_key_bytes;
}

struct entry_less {
  const key_comparator* cmp;

  bool operator()(const entry& a, const entry& b) const {
    if (a.prefix != b.prefix)
      return a.prefix < b.prefix;
    if (inline_key(a) && inline_key(b))
      return a.rank < b.rank;
    return (*cmp)(a.data, b.data) < 0;
  }
};

/// abseil's btree_set with nodes of 1 KiB instead of its 256 bytes: an
/// ack's tombstone lands at a random place in the tree, and fewer levels
/// mean fewer cache misses on the way down. btree_set offers no node size,
/// so this names the container it is built from, internal to abseil but
/// stable in Debian's 20220623 release.
using tree_type = absl::container_internal::btree_set_container<
  absl::container_internal::btree<absl::container_internal::set_params<
    entry, entry_less, std::allocator<entry>, 1024, false>>>;

/// What a tree entry costs, nodes included: ascending inserts fill
/// abseil's nodes, random ones (the acks' tombstones) split them to about
/// half full; counted at two thirds full.
constexpr size_t bytes_per_entry = sizeof(entry) * 3 / 2;

class btree_rep : public rocksdb::MemTableRep {
public:
  btree_rep(const key_comparator& cmp, rocksdb::Allocator* allocator)
    : MemTableRep(allocator), tree_(entry_less{&cmp}) {
    // nop
  }

  void Insert(rocksdb::KeyHandle handle) override { InsertKey(handle); }

  bool InsertKey(rocksdb::KeyHandle handle) override {
    const auto* data = static_cast<const char*>(handle);
    auto [it, inserted] =
      tree_.insert(make_entry(rocksdb::GetLengthPrefixedSlice(data), data));
    if (inserted) {
      ++version_;
      bytes_.fetch_add(bytes_per_entry, std::memory_order_relaxed);
    }
    return inserted;
  }

  bool Contains(const char* key) const override {
    auto probe = make_entry(rocksdb::GetLengthPrefixedSlice(key), key);
    return tree_.find(probe) != tree_.end();
  }

  size_t ApproximateMemoryUsage() override {
    return bytes_.load(std::memory_order_relaxed);
  }

  Iterator* GetIterator(rocksdb::Arena* arena) override;

  Iterator* GetDynamicPrefixIterator(rocksdb::Arena* arena) override;

  const tree_type& tree() const noexcept { return tree_; }

  uint64_t version() const noexcept { return version_; }

private:
  tree_type tree_;
  /// Counts inserts, so that an iterator notices that its position may
  /// have moved (inserts invalidate B-tree iterators).
  uint64_t version_ = 0;
  std::atomic<size_t> bytes_{0};
  /// Memory of the iterators made for an arena (see GetIterator).
  std::mutex iterators_mtx_;
  std::vector<std::unique_ptr<std::byte[]>> iterator_buffers_;
};

/// Walks the tree in order. Between calls the owner's thread may insert:
/// then the iterator finds its place again from the entry it was at.
class btree_iterator : public rocksdb::MemTableRep::Iterator {
public:
  explicit btree_iterator(const btree_rep& rep)
    : rep_(rep), it_(rep.tree().end()), version_(rep.version()) {
    // nop
  }

  bool Valid() const override { return valid_; }

  const char* key() const override { return at_.data; }

  void Next() override {
    refresh();
    ++it_;
    settle();
  }

  void Prev() override {
    refresh();
    if (it_ == rep_.tree().begin()) {
      valid_ = false;
      return;
    }
    --it_;
    settle();
  }

  void Seek(const rocksdb::Slice& internal_key,
            const char* memtable_key) override {
    version_ = rep_.version();
    it_ = rep_.tree().lower_bound(probe(internal_key, memtable_key));
    settle();
  }

  void SeekForPrev(const rocksdb::Slice& internal_key,
                   const char* memtable_key) override {
    version_ = rep_.version();
    it_ = rep_.tree().upper_bound(probe(internal_key, memtable_key));
    if (it_ == rep_.tree().begin()) {
      valid_ = false;
      return;
    }
    --it_;
    settle();
  }

  void SeekToFirst() override {
    version_ = rep_.version();
    it_ = rep_.tree().begin();
    settle();
  }

  void SeekToLast() override {
    version_ = rep_.version();
    it_ = rep_.tree().end();
    if (it_ == rep_.tree().begin()) {
      valid_ = false;
      return;
    }
    --it_;
    settle();
  }

private:
  entry probe(const rocksdb::Slice& internal_key, const char* memtable_key) {
    if (memtable_key == nullptr) {
      // Length-prefixed (varint32) as the comparator expects.
      scratch_.clear();
      auto n = static_cast<uint32_t>(internal_key.size());
      while (n >= 0x80) {
        scratch_.push_back(static_cast<char>(n | 0x80));
        n >>= 7;
      }
      scratch_.push_back(static_cast<char>(n));
      scratch_.append(internal_key.data(), internal_key.size());
      memtable_key = scratch_.data();
    }
    return make_entry(internal_key, memtable_key);
  }

  /// Takes the entry under the tree iterator as the position.
  void settle() {
    valid_ = it_ != rep_.tree().end();
    if (valid_)
      at_ = *it_;
  }

  /// After an insert, the tree iterator may dangle: find `at_` again (it
  /// is still in the tree, entries are never removed).
  void refresh() {
    if (version_ == rep_.version())
      return;
    version_ = rep_.version();
    it_ = rep_.tree().find(at_);
  }

  const btree_rep& rep_;
  tree_type::const_iterator it_;
  uint64_t version_;
  entry at_{0, 0, nullptr};
  bool valid_ = false;
  std::string scratch_;
};

rocksdb::MemTableRep::Iterator* btree_rep::GetIterator(rocksdb::Arena* arena) {
  if (arena == nullptr)
    return new btree_iterator(*this); // The caller deletes it.
  // The caller only runs the destructor of an iterator it asked to have in
  // its arena (RocksDB's Arena is not public API): the memory stays with
  // the memtable until it goes. Few such iterators are made per memtable
  // (the flush's, and a store's scans at open).
  std::lock_guard<std::mutex> guard{iterators_mtx_};
  auto& buf = iterator_buffers_.emplace_back(
    std::make_unique<std::byte[]>(sizeof(btree_iterator)));
  return new (buf.get()) btree_iterator(*this);
}

rocksdb::MemTableRep::Iterator*
btree_rep::GetDynamicPrefixIterator(rocksdb::Arena* arena) {
  if (arena != nullptr)
    return GetIterator(arena);
  // Point reads (MemTableRep::Get, which every RocksDB memtable but this
  // one overrides) ask for this iterator and never delete it, and Get
  // itself cannot be overridden outside RocksDB: its key type is internal.
  // So such a read gets its thread's one iterator, made anew each time; a
  // read runs to its end before the thread starts another.
  thread_local std::optional<btree_iterator> for_reads;
  for_reads.emplace(*this);
  return &*for_reads;
}

} // namespace

rocksdb::MemTableRep* btree_memtable_factory::CreateMemTableRep(
  const rocksdb::MemTableRep::KeyComparator& cmp, rocksdb::Allocator* allocator,
  const rocksdb::SliceTransform*, rocksdb::Logger*) {
  return new btree_rep(cmp, allocator);
}

} // namespace dally::storage
