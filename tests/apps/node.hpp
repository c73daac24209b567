#pragma once

// A dallyd child process for the multi-process suites, and dallyctl runs
// against it.

#include <chrono>
#include <csignal>
#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "process.hpp"

#ifndef DALLYD
#error "DALLYD must name the dallyd binary"
#endif
#ifndef DALLYCTL
#error "DALLYCTL must name the dallyctl binary"
#endif

namespace dally::apps::test {

/// The text of a file, or "" if it cannot be read.
inline std::string file_text(const std::string& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A running dallyd on 127.0.0.1 with a port it picked; its log (stderr)
/// goes to `log_path`.
class node {
public:
  /// Starts dallyd on `data_dir` and waits (at most 60 s) for its
  /// "listening" line; throws if it never comes.
  node(const std::string& data_dir, const std::string& log_path,
       std::vector<std::string> extra = {})
    : log_path_(log_path) {
    std::vector<std::string> argv{DALLYD, "--port", "0", "--data-dir",
                                  data_dir};
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc_ = std::make_unique<child>(argv, child::options{log_path, false, {}});
    auto deadline = steady_clock::now() + std::chrono::seconds{60};
    auto line = proc_->read_line(deadline);
    const std::string prefix = "dallyd listening on 127.0.0.1:";
    if (!line || line->rfind(prefix, 0) != 0)
      throw std::runtime_error("dallyd did not start; its log:\n" +
                               file_text(log_path));
    port_ = static_cast<uint16_t>(std::stoi(line->substr(prefix.size())));
  }

  uint16_t port() const noexcept { return port_; }

  child& proc() { return *proc_; }

  std::string log() const { return file_text(log_path_); }

  /// SIGTERM and wait: the exit code, or -1 if it did not end in time
  /// (then it is killed).
  int stop(std::chrono::milliseconds timeout = std::chrono::seconds{30}) {
    proc_->signal(SIGTERM);
    if (auto code = proc_->wait(steady_clock::now() + timeout))
      return *code;
    proc_->kill_now();
    return -1;
  }

  /// SIGKILL, no flushing, no unlocking.
  void kill() { proc_->kill_now(); }

  /// Runs dallyctl against this node.
  run_result ctl(std::vector<std::string> args, const std::string& input = {},
                 std::chrono::milliseconds timeout = std::chrono::seconds{30}) {
    std::vector<std::string> argv{DALLYCTL, "--port", std::to_string(port_)};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv, input, timeout);
  }

  /// Starts `dallyctl ... consume` (or any long-running dallyctl) in the
  /// background; its stderr goes to `stderr_path`.
  std::unique_ptr<child> spawn_ctl(std::vector<std::string> args,
                                   const std::string& stderr_path) {
    std::vector<std::string> argv{DALLYCTL, "--port", std::to_string(port_)};
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<child>(argv,
                                   child::options{stderr_path, false, {}});
  }

private:
  std::string log_path_;
  std::unique_ptr<child> proc_;
  uint16_t port_ = 0;
};

/// Lines of `text`, without the newlines.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss{text};
  std::string line;
  while (std::getline(ss, line))
    out.push_back(line);
  return out;
}

/// The wall clock in UTC ms.
inline int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch())
    .count();
}

} // namespace dally::apps::test
