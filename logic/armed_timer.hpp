#pragma once

#include <cstdint>
#include <limits>
#include <optional>

namespace dally::logic {

/// One timer an actor keeps armed at the earliest of its next work: the
/// actor sends itself a message with the generation this returns, and
/// acts on a message only if its generation is the armed one, so that
/// arming sooner (or cancelling) needs no way to take a sent message back.
class armed_timer {
public:
  static constexpr int64_t never_ms = std::numeric_limits<int64_t>::max();

  /// Arms for `at_ms` unless armed for then or sooner (the armed one
  /// re-arms when it comes): the generation to send, or nullopt.
  std::optional<uint64_t> arm(int64_t at_ms) noexcept {
    if (at_ms >= armed_ms_)
      return std::nullopt;
    armed_ms_ = at_ms;
    return ++generation_;
  }

  /// A message sent now, apart from the armed target: the generation to
  /// send (it replaces the armed one).
  uint64_t now() noexcept { return ++generation_; }

  /// Nothing to wait for: the armed message, if any, is ignored.
  void cancel() noexcept {
    if (armed_ms_ != never_ms) {
      ++generation_;
      armed_ms_ = never_ms;
    }
  }

  /// Whether the message of generation `gen` is the armed one; if so,
  /// nothing is armed any more.
  bool claim(uint64_t gen) noexcept {
    if (gen != generation_)
      return false;
    armed_ms_ = never_ms;
    return true;
  }

  /// When the armed message comes; never_ms when none is armed.
  int64_t armed_ms() const noexcept { return armed_ms_; }

private:
  uint64_t generation_ = 0;
  int64_t armed_ms_ = never_ms;
};

} // namespace dally::logic
