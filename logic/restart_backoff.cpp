#include "logic/restart_backoff.hpp"

#include <algorithm>

namespace dally::logic {

std::chrono::milliseconds restart_backoff::failed(steady_time now) {
  using std::chrono::milliseconds;
  while (!restarts_.empty() &&
         now - restarts_.front() > std::chrono::minutes{1})
    restarts_.pop_front();
  restarts_.push_back(now);
  backoff_ = backoff_.count() == 0 ? milliseconds{10}
                                   : std::min(milliseconds{1000}, backoff_ * 2);
  return restarts_.size() > max_per_minute_ ? milliseconds{60'000} : backoff_;
}

} // namespace dally::logic
