#include "runtime/watchdog.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace dally::runtime {

watchdog::~watchdog() {
  disarm();
}

void watchdog::arm(std::chrono::milliseconds limit,
                   std::function<void()> on_expiry) {
  disarm();
  std::lock_guard<std::mutex> guard{mtx_};
  armed_ = true;
  fired_ = false;
  auto deadline = std::chrono::steady_clock::now() + limit;
  thread_ = std::thread{[this, deadline, f = std::move(on_expiry)] {
    std::unique_lock<std::mutex> lock{mtx_};
    if (cv_.wait_until(lock, deadline, [this] { return !armed_; }))
      return;
    fired_ = true;
    lock.unlock();
    f();
  }};
}

bool watchdog::disarm() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    armed_ = false;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
  std::lock_guard<std::mutex> guard{mtx_};
  return fired_;
}

namespace {

std::string first_line(const std::filesystem::path& file) {
  std::ifstream in{file};
  std::string line;
  std::getline(in, line);
  return line;
}

/// The state letter of /proc/.../stat: after the name in parentheses.
std::string state_of(const std::filesystem::path& task) {
  auto stat = first_line(task / "stat");
  auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size()
           ? "?"
           : stat.substr(close + 2, 1);
}

} // namespace

std::string describe_threads() {
  std::ostringstream out;
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator{"/proc/self/task", ec}) {
    if (out.tellp() > 0)
      out << ", ";
    auto wchan = first_line(task.path() / "wchan");
    out << first_line(task.path() / "comm") << " (" << state_of(task.path())
        << ", " << (wchan.empty() || wchan == "0" ? "-" : wchan) << ")";
  }
  return ec ? "unknown (" + ec.message() + ")" : out.str();
}

} // namespace dally::runtime
