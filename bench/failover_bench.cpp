// dally-failover-bench: how long a 3-node cluster goes without a coordinator
// that can commit after kill -9 of its coordinator.
//
// Starts three dallyd cluster nodes on 127.0.0.1 (free ports, default
// timeouts), then KILLS times: waits until all three see each other and agree
// on a coordinator that has committed an entry of its term, kills the
// coordinator with SIGKILL, polls the two survivors with `dallyctl cluster
// status --json` until one of them reports itself coordinator of a newer term
// with commit_term equal to that term (it has committed the no-op a new leader
// appends, so it can commit map changes), and restarts the killed node on its
// data directory. One sample is the time from the kill to the poll answer
// that shows the commit; it is late by at most one poll round, whose mean is
// printed too. Prints every sample and p50/p99/max as markdown.
//
// Usage: dally-failover-bench [--kills N] [--dallyd PATH] [--dallyctl PATH]
//                             [--dir DIR]
//   --kills N: failovers to measure (default 20)
//   --dallyd, --dallyctl: the binaries (default: ../apps/ next to this one)
//   --dir DIR: where the nodes' data and logs go (default a new directory
//     under /tmp, removed at the end when the run succeeds)

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/apps/cluster_view.hpp"

namespace {

using dally::apps::test::free_port;
using dally::apps::test::parse_view;
using dally::apps::test::view;

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0)
    .count();
}

/// Starts `argv`; its stdout goes to `out_fd` (or a new pipe whose read end
/// is returned in `pipe_fd`), its stderr to `err_fd`.
pid_t spawn(const std::vector<std::string>& argv, int out_fd, int err_fd,
            int* pipe_fd = nullptr) {
  int p[2] = {-1, -1};
  if (pipe_fd != nullptr && ::pipe2(p, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe failed");
  pid_t pid = ::fork();
  if (pid < 0)
    throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::dup2(pipe_fd != nullptr ? p[1] : out_fd, 1);
    ::dup2(err_fd, 2);
    std::vector<char*> args;
    for (const auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  if (pipe_fd != nullptr) {
    ::close(p[1]);
    *pipe_fd = p[0];
  }
  return pid;
}

/// Reads `fd` to its end and reaps `pid`; the output, empty on failure.
std::string collect(pid_t pid, int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) != 0;) {
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? out : std::string{};
}

struct options {
  int kills = 20;
  std::string dallyd;
  std::string dallyctl;
  std::string dir;
};

std::vector<pid_t> g_children;

void kill_children_and_exit(int) {
  for (auto pid : g_children)
    if (pid > 0)
      ::kill(pid, SIGKILL);
  ::_exit(3);
}

class cluster3 {
public:
  cluster3(const options& opt, fs::path dir) : opt_(opt), dir_(std::move(dir)) {
    for (int id = 1; id <= 3; ++id)
      ports_[id] = free_port();
    for (auto [id, port] : ports_)
      seeds_ += (seeds_.empty() ? "" : ",") + std::to_string(id) +
                "@127.0.0.1:" + std::to_string(port);
    g_children.assign(4, 0);
    for (int id = 1; id <= 3; ++id)
      start(id);
  }

  ~cluster3() {
    for (int id = 1; id <= 3; ++id)
      if (pids_[id] > 0) {
        ::kill(pids_[id], SIGKILL);
        ::waitpid(pids_[id], nullptr, 0);
      }
  }

  void start(int id) {
    auto name = "n" + std::to_string(id);
    int log = ::open((dir_ / (name + ".log")).c_str(),
                     O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log < 0)
      throw std::runtime_error("cannot open the log of node " + name);
    pids_[id] =
      spawn({opt_.dallyd, "--node-id", std::to_string(id), "--cluster-seeds",
             seeds_, "--data-dir", (dir_ / name).string(), "--port", "0"},
            log, log);
    g_children[id] = pids_[id];
    ::close(log);
  }

  void kill9(int id) {
    ::kill(pids_[id], SIGKILL);
    ::waitpid(pids_[id], nullptr, 0);
    pids_[id] = g_children[id] = 0;
  }

  /// Asks every node of `ids` at once.
  std::map<int, view> poll(const std::vector<int>& ids) {
    std::map<int, std::pair<pid_t, int>> running;
    for (int id : ids) {
      int fd = -1;
      auto pid = spawn({opt_.dallyctl, "--json", "--timeout", "1s", "--port",
                        std::to_string(ports_.at(id)), "cluster", "status"},
                       -1, devnull_, &fd);
      running[id] = {pid, fd};
    }
    std::map<int, view> out;
    for (auto [id, p] : running)
      out[id] = parse_view(collect(p.first, p.second));
    ++polls_;
    return out;
  }

  uint64_t polls() const noexcept { return polls_; }

private:
  const options& opt_;
  fs::path dir_;
  std::map<int, uint16_t> ports_;
  std::map<int, pid_t> pids_;
  std::string seeds_;
  int devnull_ = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  uint64_t polls_ = 0;
};

/// All three answer, see each other, and name one coordinator that has
/// committed in its term; that coordinator, or nothing.
std::optional<int> settled(const std::map<int, view>& views) {
  const auto& first = views.begin()->second;
  for (const auto& [id, v] : views) {
    if (!v.ok || v.coordinator <= 0 || v.coordinator != first.coordinator ||
        v.term != first.term)
      return std::nullopt;
    for (auto [peer, up] : v.reachable)
      if (!up)
        return std::nullopt;
  }
  auto coord = static_cast<int>(first.coordinator);
  if (!views.at(coord).committing())
    return std::nullopt;
  return coord;
}

/// Waits until `settled` holds, for at most `limit_s` seconds.
std::pair<int, int64_t> wait_settled(cluster3& c, double limit_s) {
  auto t0 = clock_type::now();
  for (;;) {
    auto views = c.poll({1, 2, 3});
    if (auto coord = settled(views))
      return {*coord, views.at(*coord).term};
    if (ms_since(t0) > limit_s * 1000)
      throw std::runtime_error("the cluster did not settle within " +
                               std::to_string(limit_s) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds{100});
  }
}

struct sample {
  double elected_ms = 0;
  double committed_ms = 0;
  int from = 0;
  int to = 0;
  /// The coordinator's term before the kill, and the new one's.
  int64_t term_before = 0;
  int64_t term = 0;
};

/// Kills coordinator `coord` of `term` and polls the others until one has
/// committed in a newer term.
sample failover(cluster3& c, int coord, int64_t term) {
  std::vector<int> others;
  for (int id = 1; id <= 3; ++id)
    if (id != coord)
      others.push_back(id);
  sample s{.from = coord, .term_before = term};
  auto t0 = clock_type::now();
  c.kill9(coord);
  for (;;) {
    auto views = c.poll(others);
    auto now_ms = ms_since(t0);
    for (const auto& [id, v] : views) {
      if (!v.ok || v.coordinator == coord || v.term <= term)
        continue;
      if (v.coordinator > 0 && s.elected_ms == 0)
        s.elected_ms = now_ms;
      if (v.committing()) {
        s.committed_ms = now_ms;
        s.to = id;
        s.term = v.term;
        return s;
      }
    }
    if (now_ms > 20000)
      throw std::runtime_error("no standby committed within 20 s");
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
}

double percentile(std::vector<double> xs, double p) {
  std::sort(xs.begin(), xs.end());
  auto rank = static_cast<size_t>(p * static_cast<double>(xs.size()) + 0.999);
  return xs[std::clamp<size_t>(rank, 1, xs.size()) - 1];
}

options parse_options(int argc, char** argv) {
  options o;
  auto here = fs::read_symlink("/proc/self/exe").parent_path();
  o.dallyd = (here.parent_path() / "apps" / "dallyd").string();
  o.dallyctl = (here.parent_path() / "apps" / "dallyctl").string();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc)
      throw std::invalid_argument("missing value after " + a);
    std::string v = argv[++i];
    if (a == "--kills")
      o.kills = std::stoi(v);
    else if (a == "--dallyd")
      o.dallyd = v;
    else if (a == "--dallyctl")
      o.dallyctl = v;
    else if (a == "--dir")
      o.dir = v;
    else
      throw std::invalid_argument("unknown option " + a);
  }
  if (o.kills < 1)
    throw std::invalid_argument("--kills must be at least 1");
  for (const auto& bin : {o.dallyd, o.dallyctl})
    if (::access(bin.c_str(), X_OK) != 0)
      throw std::invalid_argument("not executable: " + bin);
  return o;
}

void report(const std::vector<sample>& samples, double poll_ms) {
  std::cout << "| kill | from | to | terms | elected ms | committed ms |\n"
            << "|---:|---:|---:|---:|---:|---:|\n";
  std::vector<double> committed;
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto& s = samples[i];
    std::printf("| %zu | %d | %d | %lld to %lld | %.0f | %.0f |\n", i + 1,
                s.from, s.to, static_cast<long long>(s.term_before),
                static_cast<long long>(s.term), s.elected_ms, s.committed_ms);
    committed.push_back(s.committed_ms);
  }
  std::printf("\nkill -9 to a new coordinator's first commit, %zu kills: "
              "p50 %.0f ms, p99 %.0f ms, max %.0f ms (goal p99 <= 3000 ms); "
              "mean poll round %.0f ms\n",
              committed.size(), percentile(committed, 0.5),
              percentile(committed, 0.99),
              *std::max_element(committed.begin(), committed.end()), poll_ms);
  std::fflush(stdout);
}

fs::path make_dir(const options& opt) {
  if (!opt.dir.empty()) {
    fs::create_directories(opt.dir);
    return opt.dir;
  }
  std::string tmpl = "/tmp/dally-failover-bench-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr)
    throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

int run(const options& opt) {
  auto dir = make_dir(opt);
  std::cout << "dally-failover-bench: " << opt.kills
            << " kills, nodes' data and logs in " << dir.string() << "\n\n";
  std::vector<sample> samples;
  double poll_ms = 0;
  {
    cluster3 c{opt, dir};
    auto [coord, term] = wait_settled(c, 60);
    for (int k = 0; k < opt.kills; ++k) {
      auto polls = c.polls();
      auto s = failover(c, coord, term);
      poll_ms += s.committed_ms / static_cast<double>(c.polls() - polls);
      samples.push_back(s);
      c.start(s.from);
      std::tie(coord, term) = wait_settled(c, 60);
    }
  }
  report(samples, poll_ms / static_cast<double>(samples.size()));
  if (opt.dir.empty())
    fs::remove_all(dir);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  std::signal(SIGINT, kill_children_and_exit);
  std::signal(SIGTERM, kill_children_and_exit);
  try {
    return run(parse_options(argc, argv));
  } catch (const std::invalid_argument& e) {
    std::cerr << "dally-failover-bench: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "dally-failover-bench: " << e.what() << "\n";
    return 1;
  }
}
