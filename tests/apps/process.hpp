#pragma once

// Child processes for the multi-process suites: spawn with pipes, read
// lines with deadlines, signal, wait with a deadline. Every child is
// SIGKILLed and reaped when its handle goes away, so a failing check never
// leaves a dallyd running.

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "../storage/test_support.hpp"

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

namespace dally::apps::test {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

using storage::test::temp_dir;

/// Milliseconds left until `deadline`, at least 0.
inline int ms_left(steady_clock::time_point deadline) {
  auto left =
    std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now())
      .count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1'000'000));
}

/// A running child process. Its stdout is a pipe (read with `read_line`),
/// its stderr goes to a file or a pipe, its stdin is /dev/null or a pipe
/// fed by `run`.
class child {
public:
  struct options {
    /// Where stderr goes; empty: a pipe, read by `drain`.
    std::string stderr_file;
    /// Give the child a stdin pipe (see `stdin_fd`).
    bool stdin_pipe = false;
    /// The child's working directory; empty: ours.
    std::string cwd;
  };

  child(const std::vector<std::string>& argv, options opts) {
    int out[2];
    int err[2] = {-1, -1};
    int in[2] = {-1, -1};
    if (::pipe2(out, O_CLOEXEC) != 0)
      throw std::system_error(errno, std::generic_category(), "pipe");
    if (opts.stderr_file.empty() && ::pipe2(err, O_CLOEXEC) != 0)
      throw std::system_error(errno, std::generic_category(), "pipe");
    if (opts.stdin_pipe && ::pipe2(in, O_CLOEXEC) != 0)
      throw std::system_error(errno, std::generic_category(), "pipe");
    int err_file = -1;
    if (!opts.stderr_file.empty()) {
      err_file = ::open(opts.stderr_file.c_str(),
                        O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (err_file < 0)
        throw std::system_error(errno, std::generic_category(), "open");
    }
    int null_in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    std::vector<char*> args;
    for (auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0)
      throw std::system_error(errno, std::generic_category(), "fork");
    if (pid_ == 0) {
      // Only async-signal-safe calls between fork and exec.
      ::dup2(opts.stdin_pipe ? in[0] : null_in, STDIN_FILENO);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err_file >= 0 ? err_file : err[1], STDERR_FILENO);
      if (!opts.cwd.empty() && ::chdir(opts.cwd.c_str()) != 0)
        ::_exit(126);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(null_in);
    ::close(out[1]);
    out_ = out[0];
    if (err_file >= 0) {
      ::close(err_file);
    } else {
      ::close(err[1]);
      err_ = err[0];
    }
    if (opts.stdin_pipe) {
      ::close(in[0]);
      in_ = in[1];
    }
  }

  child(const child&) = delete;
  child& operator=(const child&) = delete;

  ~child() {
    if (pid_ > 0 && !status_) {
      ::kill(pid_, SIGKILL);
      reap_blocking();
    }
    for (int fd : {out_, err_, in_})
      if (fd >= 0)
        ::close(fd);
  }

  pid_t pid() const noexcept { return pid_; }

  int stdin_fd() const noexcept { return in_; }

  void close_stdin() {
    if (in_ >= 0)
      ::close(in_);
    in_ = -1;
  }

  void signal(int sig) {
    if (!status_)
      ::kill(pid_, sig);
  }

  /// The next line of stdout (without '\n'), or nullopt at the deadline or
  /// the end of the stream.
  std::optional<std::string> read_line(steady_clock::time_point deadline) {
    for (;;) {
      if (auto nl = out_buf_.find('\n'); nl != std::string::npos) {
        auto line = out_buf_.substr(0, nl);
        out_buf_.erase(0, nl + 1);
        return line;
      }
      if (out_eof_)
        return std::nullopt;
      pollfd pfd{out_, POLLIN, 0};
      auto rc = ::poll(&pfd, 1, ms_left(deadline));
      if (rc < 0 && errno == EINTR)
        continue;
      if (rc <= 0)
        return std::nullopt;
      if (!read_some(out_, out_buf_))
        out_eof_ = true;
    }
  }

  /// Reads stdout and the stderr pipe to their ends (or the deadline),
  /// feeding `input` to stdin meanwhile (then closing it).
  void drain(steady_clock::time_point deadline, const std::string& input = {}) {
    size_t written = 0;
    if (in_ >= 0 && input.empty())
      close_stdin();
    if (in_ >= 0)
      ::fcntl(in_, F_SETFL, ::fcntl(in_, F_GETFL) | O_NONBLOCK);
    while (!out_eof_ || (err_ >= 0 && !err_eof_) || in_ >= 0) {
      std::vector<pollfd> fds;
      if (!out_eof_)
        fds.push_back({out_, POLLIN, 0});
      if (err_ >= 0 && !err_eof_)
        fds.push_back({err_, POLLIN, 0});
      if (in_ >= 0)
        fds.push_back({in_, POLLOUT, 0});
      auto rc = ::poll(fds.data(), fds.size(), ms_left(deadline));
      if (rc < 0 && errno == EINTR)
        continue;
      if (rc <= 0)
        return;
      for (auto& p : fds) {
        if (p.revents == 0)
          continue;
        if (p.fd == out_) {
          if (!read_some(out_, out_buf_))
            out_eof_ = true;
        } else if (p.fd == err_) {
          if (!read_some(err_, err_buf_))
            err_eof_ = true;
        } else {
          auto n = ::write(in_, input.data() + written, input.size() - written);
          if (n > 0)
            written += static_cast<size_t>(n);
          if ((n < 0 && errno != EAGAIN && errno != EINTR) ||
              written == input.size())
            close_stdin();
        }
      }
    }
  }

  /// Everything read from stdout and not consumed by `read_line`.
  const std::string& out() const noexcept { return out_buf_; }

  /// Everything read from the stderr pipe.
  const std::string& err() const noexcept { return err_buf_; }

  /// Waits for the child to end until `deadline`: its exit code, 128 +
  /// the signal that killed it, or nullopt if it still runs.
  std::optional<int> wait(steady_clock::time_point deadline) {
    while (!status_) {
      int st = 0;
      auto rc = ::waitpid(pid_, &st, WNOHANG);
      if (rc == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        break;
      }
      if (rc < 0 && errno != EINTR)
        throw std::system_error(errno, std::generic_category(), "waitpid");
      if (steady_clock::now() >= deadline)
        return std::nullopt;
      ::usleep(5'000);
    }
    return status_;
  }

  /// SIGKILL and reap.
  void kill_now() {
    signal(SIGKILL);
    reap_blocking();
  }

private:
  static bool read_some(int fd, std::string& buf) {
    char tmp[8192];
    for (;;) {
      auto n = ::read(fd, tmp, sizeof(tmp));
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return false;
      buf.append(tmp, static_cast<size_t>(n));
      return true;
    }
  }

  void reap_blocking() {
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
      // retry
    }
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }

  pid_t pid_ = -1;
  int out_ = -1;
  int err_ = -1;
  int in_ = -1;
  bool out_eof_ = false;
  bool err_eof_ = false;
  std::string out_buf_;
  std::string err_buf_;
  std::optional<int> status_;
};

/// What a finished command printed and how it ended.
struct run_result {
  /// Exit code, 128 + signal, or -1 if it hit the deadline (then killed).
  int code = -1;
  std::string out;
  std::string err;
};

/// Runs `argv` to its end with `input` on stdin, at most `timeout`.
inline run_result run(const std::vector<std::string>& argv,
                      const std::string& input = {},
                      milliseconds timeout = milliseconds{30'000}) {
  // A child that exits without reading its input must not kill us.
  ::signal(SIGPIPE, SIG_IGN);
  child c{argv, child::options{{}, true, {}}};
  auto deadline = steady_clock::now() + timeout;
  c.drain(deadline, input);
  run_result r;
  if (auto code = c.wait(deadline))
    r.code = *code;
  else
    c.kill_now();
  r.out = c.out();
  r.err = c.err();
  return r;
}

/// The value of `"key":` in a flat JSON object line: a number or a string
/// (escapes decoded; \u00XX as one byte), nullopt if absent.
inline std::optional<std::string> json_field(const std::string& line,
                                             const std::string& key) {
  auto needle = "\"" + key + "\":";
  auto pos = line.find(needle);
  if (pos == std::string::npos)
    return std::nullopt;
  pos += needle.size();
  if (pos >= line.size())
    return std::nullopt;
  if (line[pos] != '"') {
    auto end = line.find_first_of(",}]", pos);
    return line.substr(pos, end - pos);
  }
  std::string out;
  for (++pos; pos < line.size() && line[pos] != '"'; ++pos) {
    if (line[pos] != '\\') {
      out += line[pos];
      continue;
    }
    ++pos;
    switch (line[pos]) {
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'u':
        out +=
          static_cast<char>(std::stoi(line.substr(pos + 1, 4), nullptr, 16));
        pos += 4;
        break;
      default:
        out += line[pos];
    }
  }
  return out;
}

/// A JSON field as an integer (throws if absent or not a number).
inline int64_t json_int(const std::string& line, const std::string& key) {
  auto v = json_field(line, key);
  if (!v)
    throw std::runtime_error("no field " + key + " in " + line);
  return std::stoll(*v);
}

} // namespace dally::apps::test
