#pragma once

// Server processes for dally-peers-bench: started as children of the
// driver, stopped with SIGTERM then SIGKILL, never left behind: RAII stops
// them, a signal thread stops them when the driver is interrupted, and
// PR_SET_PDEATHSIG kills them if the driver itself dies.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "bench/peers/peer.hpp"

namespace dally::bench::peers {

using steady_time = std::chrono::steady_clock::time_point;

/// A server started as a child process: its working directory is its data
/// directory (so that a leftover can be found by it, see `leftover_servers`),
/// stdin /dev/null, stdout a pipe (`read_line`), stderr appended to a log
/// file.
class server_process {
public:
  /// Forks and execs `argv` (argv[0] a path). Call it from the main thread
  /// only: the child is killed when the thread that forked it ends.
  server_process(std::vector<std::string> argv,
                 const std::filesystem::path& cwd,
                 const std::filesystem::path& log_path);

  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;

  /// Stops the server if it still runs (see `stop`).
  ~server_process();

  pid_t pid() const noexcept { return pid_; }

  const std::string& program() const noexcept { return program_; }

  /// The next stdout line (without '\n'), or nullopt at `deadline` or when
  /// stdout ends.
  std::optional<std::string> read_line(steady_time deadline);

  /// True while the process has not exited (reaps it if it has).
  bool running();

  /// SIGTERM, wait up to `grace`, then SIGKILL; always reaps. Returns ""
  /// after a clean stop (exit code 0, or ended by the SIGTERM) and a note
  /// otherwise.
  std::string stop(std::chrono::milliseconds grace = std::chrono::seconds{10});

  /// How the process ended, e.g. "exit code 1" or "killed by signal 9";
  /// empty while it runs.
  std::string exit_description() const;

  /// The last `max_bytes` of its log, for error messages.
  std::string log_tail(size_t max_bytes = 2000) const;

private:
  void reap(bool block);

  std::string program_;
  std::filesystem::path log_path_;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string out_buf_;
  bool out_eof_ = false;
  std::optional<int> status_;
};

/// /proc/PID/stat and /proc/PID/status: CPU seconds (utime + stime of all
/// threads), VmRSS and VmHWM. Throws peer_error if the process is gone.
resource_usage process_usage(pid_t pid);

/// The same for this process.
resource_usage self_usage();

/// Resets this process's VmHWM to its current RSS (writes 5 to
/// /proc/self/clear_refs; Linux >= 4.0); false if that failed.
bool reset_self_peak();

/// A TCP port on 127.0.0.1 that was free a moment ago (bound and closed).
uint16_t pick_free_port();

/// Connects to 127.0.0.1:`port` until it accepts or `deadline` passes;
/// false then.
bool wait_for_listener(uint16_t port, steady_time deadline);

/// Restores the default action of SIGINT, SIGTERM and SIGHUP (a shell
/// starts background jobs with SIGINT ignored), blocks them in the calling
/// thread (call it in main before any other thread starts, so that every
/// thread inherits the mask) and starts a thread that takes them with
/// sigwait: it stops every
/// running server_process (SIGTERM, then SIGKILL after 5 s), removes
/// `scratch_root` and exits with 128 + the signal.
void install_signal_guard(const std::filesystem::path& scratch_root);

/// create_directories, unless a signal arrived (then it throws
/// peer_error): the signal thread removes the scratch root, and nothing
/// may create a directory in it after that.
void make_dirs(const std::filesystem::path& dir);

/// Removes the directories "run-PID" under `root` whose process is gone
/// (left by a driver that was killed).
void remove_stale_runs(const std::filesystem::path& root);

/// True once the signal thread took a signal.
bool interrupted();

/// Never returns after a signal (the signal thread ends the process once
/// the servers are stopped); returns at once otherwise. Call it before
/// main returns.
void wait_if_interrupted();

/// Processes whose working directory lies under `root` (other than this
/// one): servers of this run that are still alive, as "pid (comm)".
std::vector<std::string> leftover_servers(const std::filesystem::path& root,
                                          std::vector<pid_t>* pids = nullptr);

/// Runs `cmd` through the shell and returns its stdout without the final
/// newline ("" on failure).
std::string command_output(const std::string& cmd);

/// A peer that is a server process of its own (Redis, beanstalkd): its
/// usage is that process's, and stopping the peer stops the process.
class server_peer : public peer {
public:
  resource_usage usage() const override;

  std::string stop() override;

protected:
  std::optional<server_process> server_;
};

} // namespace dally::bench::peers
