#include "bench/peers/process.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

namespace dally::bench::peers {

namespace {

/// Pids of the servers started and not yet reaped, for the signal thread.
std::mutex registry_mtx;
std::set<pid_t> registry;

/// Set by the signal thread before it stops the servers.
std::atomic<bool> interrupted_flag{false};

/// Held by make_dirs, and by the signal thread from when it removes the
/// scratch root until the process ends, so that nothing recreates it.
std::mutex scratch_mtx;

void register_pid(pid_t pid) {
  std::lock_guard<std::mutex> guard{registry_mtx};
  registry.insert(pid);
}

void unregister_pid(pid_t pid) {
  std::lock_guard<std::mutex> guard{registry_mtx};
  registry.erase(pid);
}

std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

int ms_until(steady_time deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now())
                .count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1'000'000));
}

/// The value in kB of `key` ("VmRSS:") in a /proc status file, 0 if absent.
uint64_t status_kib(const std::string& text, const std::string& key) {
  auto pos = text.find(key);
  if (pos == std::string::npos)
    return 0;
  return std::strtoull(text.c_str() + pos + key.size(), nullptr, 10);
}

std::string read_text(const std::string& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

} // namespace

// -- server_process -----------------------------------------------------------

server_process::server_process(std::vector<std::string> argv,
                               const std::filesystem::path& cwd,
                               const std::filesystem::path& log_path)
  : program_(argv.at(0)), log_path_(log_path) {
  if (interrupted())
    throw peer_error("interrupted");
  if (::access(program_.c_str(), X_OK) != 0)
    throw peer_error("cannot run " + program_ + ": " + std::strerror(errno));
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    throw peer_error(errno_text("pipe"));
  int log_fd =
    ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    ::close(out[0]);
    ::close(out[1]);
    throw peer_error(errno_text("cannot open " + log_path.string()));
  }
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(a.data());
  args.push_back(nullptr);
  std::string dir = cwd.string();
  pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) {
    auto err = errno_text("fork");
    ::close(out[0]);
    ::close(out[1]);
    ::close(log_fd);
    ::close(null_fd);
    throw peer_error(err);
  }
  if (pid_ == 0) {
    // Only async-signal-safe calls between fork and exec. Die with the
    // driver; undo its blocked signals and ignored SIGPIPE, which exec
    // would otherwise pass on.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent)
      ::_exit(126);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP})
      ::sigaction(sig, &dfl, nullptr);
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    if (::chdir(dir.c_str()) != 0)
      ::_exit(126);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  register_pid(pid_);
  ::close(out[1]);
  ::close(log_fd);
  ::close(null_fd);
  out_fd_ = out[0];
}

server_process::~server_process() {
  if (pid_ > 0 && !status_) {
    auto note = stop(std::chrono::seconds{5});
    if (!note.empty())
      std::cerr << "note: " << program_ << " (pid " << pid_ << "): " << note
                << '\n';
  }
  if (out_fd_ >= 0)
    ::close(out_fd_);
}

std::optional<std::string> server_process::read_line(steady_time deadline) {
  for (;;) {
    if (auto nl = out_buf_.find('\n'); nl != std::string::npos) {
      auto line = out_buf_.substr(0, nl);
      out_buf_.erase(0, nl + 1);
      return line;
    }
    if (out_eof_)
      return std::nullopt;
    pollfd pfd{out_fd_, POLLIN, 0};
    auto rc = ::poll(&pfd, 1, ms_until(deadline));
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc <= 0)
      return std::nullopt;
    char buf[4096];
    auto n = ::read(out_fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      out_eof_ = true;
    else
      out_buf_.append(buf, static_cast<size_t>(n));
  }
}

void server_process::reap(bool block) {
  if (status_ || pid_ <= 0)
    return;
  int st = 0;
  for (;;) {
    auto rc = ::waitpid(pid_, &st, block ? 0 : WNOHANG);
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc == pid_) {
      status_ = st;
      unregister_pid(pid_);
    } else if (rc < 0) {
      // Reaped elsewhere (the signal thread): gone all the same.
      status_ = 0;
      unregister_pid(pid_);
    }
    return;
  }
}

bool server_process::running() {
  reap(false);
  return !status_;
}

std::string server_process::stop(std::chrono::milliseconds grace) {
  if (!running())
    return "it had already ended (" + exit_description() + ")";
  ::kill(pid_, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + grace;
  while (running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  if (running()) {
    ::kill(pid_, SIGKILL);
    reap(true);
    return "did not stop within " + std::to_string(grace.count()) +
           " ms of SIGTERM; killed";
  }
  int st = *status_;
  if ((WIFEXITED(st) && WEXITSTATUS(st) == 0) ||
      (WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM))
    return "";
  return "stopped with " + exit_description();
}

std::string server_process::exit_description() const {
  if (!status_)
    return "";
  int st = *status_;
  if (WIFEXITED(st))
    return "exit code " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st))
    return "killed by signal " + std::to_string(WTERMSIG(st));
  return "status " + std::to_string(st);
}

std::string server_process::log_tail(size_t max_bytes) const {
  auto text = read_text(log_path_.string());
  if (text.size() > max_bytes)
    text = "..." + text.substr(text.size() - max_bytes);
  return text;
}

// -- /proc --------------------------------------------------------------------

resource_usage process_usage(pid_t pid) {
  auto base = "/proc/" + std::to_string(pid);
  auto stat = read_text(base + "/stat");
  auto status = read_text(base + "/status");
  // Fields after the command name, which may hold spaces and parentheses:
  // state is field 3, utime 14, stime 15.
  auto close = stat.rfind(')');
  if (stat.empty() || status.empty() || close == std::string::npos)
    throw peer_error("process " + std::to_string(pid) + " is gone");
  std::istringstream in{stat.substr(close + 2)};
  std::string field;
  uint64_t utime = 0;
  uint64_t stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14)
      utime = std::stoull(field);
    else if (i == 15)
      stime = std::stoull(field);
  }
  auto ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  resource_usage u;
  u.cpu_s = static_cast<double>(utime + stime) / ticks;
  u.rss_kib = status_kib(status, "VmRSS:");
  u.hwm_kib = status_kib(status, "VmHWM:");
  return u;
}

resource_usage self_usage() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  resource_usage u;
  u.cpu_s =
    static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
    static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  auto status = read_text("/proc/self/status");
  u.rss_kib = status_kib(status, "VmRSS:");
  u.hwm_kib = status_kib(status, "VmHWM:");
  return u;
}

bool reset_self_peak() {
  std::ofstream out{"/proc/self/clear_refs"};
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

// -- sockets ------------------------------------------------------------------

uint16_t pick_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    throw peer_error(errno_text("socket"));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    auto err = errno_text("bind 127.0.0.1:0");
    ::close(fd);
    throw peer_error(err);
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool wait_for_listener(uint16_t port, steady_time deadline) {
  for (;;) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      throw peer_error(errno_text("socket"));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    auto rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::close(fd);
    if (rc == 0)
      return true;
    if (std::chrono::steady_clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
}

// -- signals ------------------------------------------------------------------

void install_signal_guard(const std::filesystem::path& scratch_root) {
  // A shell starts background jobs with SIGINT ignored, and an ignored
  // signal never reaches sigwait: take them back.
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    ::signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set, scratch_root] {
    int sig = 0;
    while (::sigwait(&set, &sig) != 0) {
      // retry
    }
    interrupted_flag = true;
    std::vector<pid_t> pids;
    {
      std::lock_guard<std::mutex> guard{registry_mtx};
      pids.assign(registry.begin(), registry.end());
    }
    std::cerr << "\ndally-peers-bench: interrupted by signal " << sig
              << ", stopping " << pids.size() << " server(s)" << std::endl;
    for (auto pid : pids)
      ::kill(pid, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{5};
    for (auto pid : pids) {
      for (;;) {
        int st = 0;
        auto rc = ::waitpid(pid, &st, WNOHANG);
        if (rc == pid || (rc < 0 && errno != EINTR))
          break;
        if (std::chrono::steady_clock::now() >= deadline) {
          ::kill(pid, SIGKILL);
          ::waitpid(pid, &st, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds{10});
      }
    }
    std::lock_guard<std::mutex> guard{scratch_mtx};
    std::error_code ec;
    std::filesystem::remove_all(scratch_root, ec);
    ::_exit(128 + sig);
  }).detach();
}

void make_dirs(const std::filesystem::path& dir) {
  std::lock_guard<std::mutex> guard{scratch_mtx};
  if (interrupted())
    throw peer_error("interrupted");
  std::filesystem::create_directories(dir);
}

void remove_stale_runs(const std::filesystem::path& root) {
  std::error_code ec;
  for (auto& entry : std::filesystem::directory_iterator(root, ec)) {
    auto name = entry.path().filename().string();
    if (name.rfind("run-", 0) != 0)
      continue;
    auto pid = name.substr(4);
    if (pid.empty() || !std::all_of(pid.begin(), pid.end(), [](char c) {
          return c >= '0' && c <= '9';
        }))
      continue;
    if (std::filesystem::exists("/proc/" + pid))
      continue;
    std::error_code rm_ec;
    std::filesystem::remove_all(entry.path(), rm_ec);
  }
}

bool interrupted() {
  return interrupted_flag.load();
}

void wait_if_interrupted() {
  while (interrupted())
    ::pause();
}

std::vector<std::string> leftover_servers(const std::filesystem::path& root,
                                          std::vector<pid_t>* pids) {
  std::vector<std::string> out;
  auto prefix = std::filesystem::weakly_canonical(root).string();
  auto self = ::getpid();
  std::error_code ec;
  for (auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    auto name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) {
          return c >= '0' && c <= '9';
        }))
      continue;
    auto pid = static_cast<pid_t>(std::stol(name));
    if (pid == self)
      continue;
    std::error_code link_ec;
    auto cwd = std::filesystem::read_symlink(entry.path() / "cwd", link_ec);
    if (link_ec)
      continue;
    auto dir = cwd.string();
    if (dir == prefix || dir.rfind(prefix + "/", 0) == 0) {
      auto comm = read_text(entry.path().string() + "/comm");
      if (!comm.empty() && comm.back() == '\n')
        comm.pop_back();
      out.push_back(name + " (" + comm + ")");
      if (pids != nullptr)
        pids->push_back(pid);
    }
  }
  return out;
}

std::string command_output(const std::string& cmd) {
  auto* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr)
    return "";
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), pipe) != nullptr)
    out += buf;
  ::pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r'))
    out.pop_back();
  return out;
}

resource_usage server_peer::usage() const {
  return process_usage(server_->pid());
}

std::string server_peer::stop() {
  if (!server_)
    return "";
  auto note = server_->stop();
  server_.reset();
  return note;
}

} // namespace dally::bench::peers
