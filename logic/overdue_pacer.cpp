#include "logic/overdue_pacer.hpp"

#include <algorithm>

#include "core/time_range.hpp"

namespace dally::logic {

int64_t overdue_pacer::capacity_milli() const noexcept {
  auto burst = std::max<int64_t>(opts_.rate_per_s / 10, 1);
  return burst * 1000;
}

void overdue_pacer::start_pass(int64_t now_ms) {
  if (pacing()) {
    // Tokens in thousandths: the rate per second is exactly the
    // thousandths earned per ms.
    auto capacity = capacity_milli();
    if (!bucket_started_) {
      bucket_started_ = true;
      tokens_milli_ = capacity;
      tokens_at_ms_ = now_ms;
    } else if (now_ms <= tokens_at_ms_) {
      // A clock that went back earns nothing and restarts from here.
      tokens_at_ms_ = now_ms;
    } else {
      int64_t earned = 0;
      if (__builtin_mul_overflow(now_ms - tokens_at_ms_,
                                 int64_t{opts_.rate_per_s}, &earned) ||
          earned >= capacity)
        tokens_milli_ = capacity;
      else
        tokens_milli_ = std::min(capacity, tokens_milli_ + earned);
      tokens_at_ms_ = now_ms;
    }
  }
  if (!backlog_started_) {
    // What is overdue beyond the threshold now is the backlog of the time
    // the shard was down; only that is paced.
    backlog_started_ = true;
    backlog_before_ms_ = core::saturating_add(now_ms, -opts_.late_threshold_ms);
  }
}

void overdue_pacer::clock_stepped(int64_t now_ms) noexcept {
  auto before = core::saturating_add(now_ms, -opts_.late_threshold_ms);
  if (!backlog_started_ || backlog_before_ms_ < before) {
    backlog_started_ = true;
    backlog_before_ms_ = before;
  }
}

int64_t overdue_pacer::late_before_ms(int64_t now_ms) const noexcept {
  return std::min(core::saturating_add(now_ms, -opts_.late_threshold_ms),
                  backlog_before_ms_);
}

bool overdue_pacer::enqueue(const storage::due_key& key) {
  if (full())
    return false;
  backlog_.push_back(key);
  return true;
}

size_t overdue_pacer::take_turns(size_t limit,
                                 std::vector<storage::due_key>& out) {
  auto n = std::min(
    {limit, backlog_.size(), static_cast<size_t>(tokens_milli_ / 1000)});
  out.assign(backlog_.begin(), backlog_.begin() + static_cast<ptrdiff_t>(n));
  backlog_.erase(backlog_.begin(),
                 backlog_.begin() + static_cast<ptrdiff_t>(n));
  return n;
}

int64_t overdue_pacer::next_token_ms() const noexcept {
  if (has_token())
    return tokens_at_ms_;
  auto missing = 1000 - tokens_milli_;
  int64_t rate = opts_.rate_per_s;
  return core::saturating_add(tokens_at_ms_, (missing + rate - 1) / rate);
}

void overdue_pacer::clear() {
  backlog_.clear();
  backlog_.shrink_to_fit();
}

} // namespace dally::logic
