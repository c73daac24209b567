#include "bench/peers/peer.hpp"

#include <charconv>
#include <thread>

namespace dally::bench::peers {

int64_t wall_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch())
    .count();
}

int64_t wall_ms() {
  return wall_us() / 1000;
}

std::string encode_body(uint64_t id, int64_t due_ms, size_t payload_bytes) {
  std::string body = std::to_string(id);
  body += ':';
  body += std::to_string(due_ms);
  body += ':';
  if (body.size() < payload_bytes)
    body.append(payload_bytes - body.size(), '.');
  return body;
}

bool decode_body(std::string_view body, uint64_t& id, int64_t& due_ms) {
  const char* first = body.data();
  const char* last = body.data() + body.size();
  auto r1 = std::from_chars(first, last, id);
  if (r1.ec != std::errc{} || r1.ptr == last || *r1.ptr != ':')
    return false;
  auto r2 = std::from_chars(r1.ptr + 1, last, due_ms);
  return r2.ec == std::errc{} && r2.ptr != last && *r2.ptr == ':';
}

delivery_log::delivery_log(uint64_t tasks)
  : tasks_(tasks), tasks_seen_(new task_seen[tasks]) {
  // nop
}

void delivery_log::received(std::string_view body, int64_t recv_us) {
  deliveries_.fetch_add(1, std::memory_order_relaxed);
  uint64_t id = 0;
  int64_t due_ms = 0;
  if (!decode_body(body, id, due_ms) || id >= tasks_) {
    malformed_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // Keep the earliest receive time: an early delivery must not hide
  // behind a later one.
  auto& seen_task = tasks_seen_[id];
  auto& first = seen_task.first_us;
  auto seen = first.load(std::memory_order_relaxed);
  while (
    (seen == 0 || recv_us < seen) &&
    !first.compare_exchange_weak(seen, recv_us, std::memory_order_relaxed)) {
    // seen reloaded
  }
  seen_task.body_due_ms.store(due_ms, std::memory_order_relaxed);
  if (seen_task.count.fetch_add(1, std::memory_order_relaxed) == 0)
    unique_.fetch_add(1, std::memory_order_relaxed);
}

bool peer::wait_settled(uint64_t n, const delivery_log& log,
                        std::chrono::steady_clock::time_point deadline) {
  while (log.acked() < n) {
    if (std::chrono::steady_clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::microseconds{200});
  }
  return true;
}

std::unique_ptr<peer> make_peer(const std::string& system,
                                const peer_options& opts) {
  if (system == "dally")
    return make_dally_peer(opts, dally_kind::remote);
  if (system == "dally-embedded")
    return make_dally_peer(opts, dally_kind::embedded);
  if (system == "dally-cluster3")
    return make_dally_peer(opts, dally_kind::cluster3);
  if (system == "redis")
    return make_redis_peer(opts);
  if (system == "beanstalkd")
    return make_beanstalkd_peer(opts);
  throw peer_error(
    "unknown system '" + system +
    "' (dally, dally-embedded, dally-cluster3, redis, beanstalkd)");
}

std::string thread_consumer_group::stop() {
  stop_ = true;
  for (auto& t : threads_)
    if (t.joinable())
      t.join();
  return error();
}

std::string thread_consumer_group::error() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return error_;
}

void thread_consumer_group::keep_error(const std::string& what) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (error_.empty())
    error_ = what;
}

} // namespace dally::bench::peers
