// dally-sim: the deterministic simulator's command line.
//
//   dally-sim [--seed N] [--nodes N | --cluster] [--plant BUG] [--verbose]
//     [--data-root DIR] [--twice] [--expect-invariant NAME]
//     [--expect-damaged N]
//     One run (with --twice two, which must give the same hash). Without --seed
//     a random one, printed first with every parameter drawn from it. Ends with
//     `hash=<hex>`; on a violation prints the invariant, the last events and
//     the command that reproduces it, and exits 1. With --expect-invariant
//     it exits 0 only if the run broke that invariant; with
//     --expect-damaged, only if it damaged N stored records.
//   dally-sim --swarm K [--jobs J] [--swarm-seed S] [--plant BUG] [--twice]
//     K random seeds, J processes at a time; prints seeds per second and
//     every failing seed; exits 1 if any failed.
//   dally-sim --seeds-file FILE [--jobs J] [--twice]
//     The seeds listed in FILE (one per line, `#` comments), as --swarm.
//   dally-sim --plant BUG --expect-failure-within K [--expect-invariant NAME]
//     The self-test: seeds 1..K with BUG planted in the engine; exits 0 at
//     the first seed whose run fails (on NAME, if given), 1 if none does or
//     it fails on another invariant.
// --nodes N (3 to 5), or --cluster (as many as the seed draws), runs a
// cluster of engines with the shard map from Raft instead of one engine
// (docs/simulation.md); every form above takes it.
// BUG: one of sim/planted.hpp's bugs (see docs/simulation.md), such as
// fire-early; `dally-sim --help` lists them.

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sim/prng.hpp"
#include "sim/simulation.hpp"

extern char** environ;

namespace {

using namespace dally;

std::string bug_names() {
  std::string out;
  for (auto bug : sim::planted_bugs())
    if (bug != sim::planted_bug::none)
      out += (out.empty() ? "" : ", ") + sim::planted_name(bug);
  return out;
}

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "dally-sim: " << why << "\n"
            << "usage: dally-sim [--seed N] [--nodes N | --cluster] "
               "[--plant BUG] [--verbose] [--data-root DIR] [--twice]\n"
               "         [--expect-invariant NAME] [--expect-damaged N]\n"
            << "       dally-sim --swarm K [--jobs J] [--swarm-seed S] "
               "[--plant BUG] [--twice]\n"
            << "       dally-sim --seeds-file FILE [--jobs J] [--twice]\n"
            << "       dally-sim --plant BUG --expect-failure-within K "
               "[--expect-invariant NAME]\n"
            << "BUG: " << bug_names() << "\n";
  std::exit(2);
}

uint64_t parse_u64(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    auto x = std::stoull(text, &used, 0);
    if (used == text.size() && text[0] != '-')
      return x;
  } catch (const std::exception&) {
    // Reported below.
  }
  usage(flag + " needs a non-negative integer, got '" + text + "'");
}

/// A seed's run (child process) that takes longer than this hangs.
constexpr std::chrono::seconds seed_timeout{120};

/// The options that shape a run, as on the command line (none for a run
/// of one engine).
std::vector<std::string> shape_args(const sim::sim_options& opts) {
  std::vector<std::string> out;
  if (opts.nodes > 0)
    out = {"--nodes", std::to_string(opts.nodes)};
  else if (opts.cluster)
    out = {"--cluster"};
  if (opts.plant != sim::planted_bug::none) {
    out.push_back("--plant");
    out.push_back(sim::planted_name(opts.plant));
  }
  return out;
}

std::string repro(uint64_t seed, const sim::sim_options& opts) {
  std::string out = "dally-sim --seed " + std::to_string(seed);
  for (const auto& a : shape_args(opts))
    out += " " + a;
  return out;
}

/// What the command line asks for.
struct cli {
  sim::sim_options opts;
  bool has_seed = false;
  bool brief = false;
  bool twice = false;
  uint64_t swarm = 0;
  uint64_t expect_within = 0;
  uint32_t jobs = 1;
  std::optional<uint64_t> swarm_seed;
  std::string seeds_file;
  /// The invariant the run (or the first failing seed) must break.
  std::string expect_invariant;
  /// Stored records the run must damage.
  std::optional<uint64_t> expect_damaged;
};

/// Whether a run ended as `args` expects: passed, or (with
/// --expect-invariant) failed on that invariant; with --expect-damaged,
/// after damaging that many records. Says why not.
bool as_expected(const cli& args, const sim::sim_result& res) {
  if (args.expect_damaged && res.damaged != *args.expect_damaged) {
    std::cout << "expected " << *args.expect_damaged << " damaged records, got "
              << res.damaged << '\n';
    return false;
  }
  if (args.expect_invariant.empty())
    return !res.failure;
  if (res.failure && res.failure->invariant == args.expect_invariant)
    return true;
  std::cout << "expected a violation of " << args.expect_invariant << ", got "
            << (res.failure ? res.failure->invariant : std::string{"none"})
            << '\n';
  return false;
}

/// One run in this process, reported in full; with `twice`, the seed runs
/// again and must give the same event-log hash.
int run_one(const cli& args) {
  const auto& opts = args.opts;
  std::cout << "seed=" << opts.seed << std::endl;
  auto res = sim::run_simulation(opts);
  if (args.twice) {
    auto again = sim::run_simulation(opts);
    if (again.hash != res.hash) {
      std::cout << "VIOLATION determinism: the second run's hash " << again.hash
                << " differs from the first's " << res.hash << " ("
                << res.events << " and " << again.events
                << " events)\nreproduce: " << repro(opts.seed, opts)
                << " --twice\nhash=" << res.hash << std::endl;
      return 1;
    }
  }
  if (!args.brief)
    std::cout << "params: " << res.params.describe() << '\n';
  std::cout << "steps=" << res.steps << " events=" << res.events
            << " acknowledged=" << res.acknowledged
            << " deliveries=" << res.deliveries << " restarts=" << res.restarts
            << " damaged=" << res.damaged << '\n';
  if (res.failure) {
    std::cout << "VIOLATION " << res.failure->invariant << ": "
              << res.failure->detail << '\n';
    if (!args.brief) {
      std::cout << "last events (true ms since start, event):\n";
      for (const auto& line : res.last_events)
        std::cout << "  " << line << '\n';
    }
    std::cout << "reproduce: " << repro(opts.seed, opts) << '\n';
  }
  bool ok = as_expected(args, res);
  std::cout << "hash=" << res.hash << std::endl;
  return ok ? 0 : 1;
}

/// A seed's run in a child process of this binary, its output in `path`.
pid_t spawn_seed(uint64_t seed, const cli& args, const std::string& path) {
  static const auto self =
    std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::string> argv_s{self, "--seed", std::to_string(seed),
                                  "--brief"};
  for (const auto& a : shape_args(args.opts))
    argv_s.push_back(a);
  if (args.twice)
    argv_s.push_back("--twice");
  if (!args.opts.data_root.empty()) {
    argv_s.push_back("--data-root");
    argv_s.push_back(args.opts.data_root);
  }
  std::vector<char*> argv;
  for (auto& a : argv_s)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  auto rc =
    posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    std::cerr << "dally-sim: cannot start " << self << std::endl;
    std::exit(2);
  }
  return pid;
}

/// Why a finished child failed (its VIOLATION line if it printed one), or
/// nothing if it passed.
std::optional<std::string> failure_of(int status, bool hung,
                                      const std::filesystem::path& out) {
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    return std::nullopt;
  std::string why = hung ? std::string{"no end within the time limit"}
                    : WIFSIGNALED(status)
                      ? "killed by signal " + std::to_string(WTERMSIG(status))
                      : "exit " + std::to_string(WEXITSTATUS(status));
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VIOLATION", 0) == 0)
      why = line;
  return why;
}

/// Runs each seed as a child process of this binary, `args.jobs` at a
/// time; returns the failing ones with their violation line.
std::map<uint64_t, std::string> run_many(const std::vector<uint64_t>& seeds,
                                         const cli& args) {
  std::map<uint64_t, std::string> failed;
  auto out_dir = std::filesystem::temp_directory_path() /
                 ("dally-sim-swarm-" + std::to_string(::getpid()));
  std::filesystem::create_directories(out_dir);
  struct child {
    uint64_t seed;
    std::chrono::steady_clock::time_point started;
  };
  std::map<pid_t, child> running;
  auto collect = [&] {
    int status = 0;
    auto pid = ::waitpid(-1, &status, WNOHANG);
    if (pid == 0) {
      // A seed that runs too long hangs: stop it, it counts as failed.
      auto now = std::chrono::steady_clock::now();
      for (auto& [p, c] : running)
        if (now - c.started > seed_timeout)
          ::kill(p, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
      return;
    }
    if (pid < 0)
      return;
    auto [seed, started] = running[pid];
    running.erase(pid);
    bool hung = std::chrono::steady_clock::now() - started > seed_timeout;
    auto path = out_dir / std::to_string(seed);
    if (auto why = failure_of(status, hung, path)) {
      failed[seed] = *why;
      std::cout << "FAILED seed=" << seed << ": " << *why
                << "\n  reproduce: " << repro(seed, args.opts) << std::endl;
    }
    std::filesystem::remove(path);
  };
  for (size_t next = 0; next < seeds.size() || !running.empty();) {
    if (next < seeds.size() && running.size() < args.jobs) {
      auto seed = seeds[next++];
      auto pid =
        spawn_seed(seed, args, (out_dir / std::to_string(seed)).string());
      running[pid] = child{seed, std::chrono::steady_clock::now()};
      continue;
    }
    collect();
  }
  std::error_code ec;
  std::filesystem::remove_all(out_dir, ec);
  return failed;
}

int report_many(const std::vector<uint64_t>& seeds, const cli& args) {
  auto start = std::chrono::steady_clock::now();
  auto failed = run_many(seeds, args);
  auto secs =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
  std::cout << seeds.size() << " seeds in " << secs << " s ("
            << (secs > 0 ? static_cast<double>(seeds.size()) / secs : 0)
            << " seeds/s, " << args.jobs << " jobs): " << failed.size()
            << " failed" << std::endl;
  for (const auto& [seed, why] : failed)
    std::cout << "failing seed " << seed << ": " << why << std::endl;
  return failed.empty() ? 0 : 1;
}

/// The self-test: seeds 1 to K with a bug planted; succeeds at the first
/// seed whose run fails, if it fails as expected.
int expect_failure(cli& args) {
  auto& opts = args.opts;
  auto name = sim::planted_name(opts.plant);
  for (uint64_t seed = 1; seed <= args.expect_within; ++seed) {
    opts.seed = seed;
    auto res = sim::run_simulation(opts);
    if (!res.failure)
      continue;
    std::cout << "planted " << name << " found at seed " << seed
              << " (of at most " << args.expect_within
              << "): " << res.failure->invariant << ": " << res.failure->detail
              << std::endl;
    return as_expected(args, res) ? 0 : 1;
  }
  std::cout << "planted " << name << " NOT found in seeds 1 to "
            << args.expect_within << std::endl;
  return 1;
}

std::vector<uint64_t> read_seeds(const std::string& file) {
  std::ifstream in(file);
  if (!in)
    usage("cannot read " + file);
  std::vector<uint64_t> seeds;
  for (std::string line; std::getline(in, line);) {
    auto hash = line.find('#');
    if (hash != std::string::npos)
      line.erase(hash);
    auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos)
      continue;
    auto last = line.find_last_not_of(" \t");
    seeds.push_back(
      parse_u64("a seed in " + file, line.substr(first, last - first + 1)));
  }
  return seeds;
}

/// Parses one option at argv[i] (moving i past its value) into `args`.
void parse_option(cli& args, int argc, char** argv, int& i) {
  std::string arg = argv[i];
  auto next = [&]() -> std::string {
    if (i + 1 >= argc)
      usage(arg + " needs a value");
    return argv[++i];
  };
  if (arg == "--seed") {
    args.opts.seed = parse_u64(arg, next());
    args.has_seed = true;
  } else if (arg == "--plant") {
    auto name = next();
    auto bug = sim::parse_planted(name);
    if (!bug)
      usage("unknown bug '" + name + "'");
    args.opts.plant = *bug;
  } else if (arg == "--nodes") {
    auto n = parse_u64(arg, next());
    if (n < 3 || n > 5)
      usage("--nodes needs 3, 4 or 5");
    args.opts.nodes = static_cast<uint32_t>(n);
  } else if (arg == "--cluster") {
    args.opts.cluster = true;
  } else if (arg == "--verbose") {
    args.opts.verbose = true;
  } else if (arg == "--brief") {
    args.brief = true;
  } else if (arg == "--twice") {
    args.twice = true;
  } else if (arg == "--data-root") {
    args.opts.data_root = next();
  } else if (arg == "--swarm") {
    args.swarm = parse_u64(arg, next());
  } else if (arg == "--jobs") {
    args.jobs =
      static_cast<uint32_t>(std::max<uint64_t>(1, parse_u64(arg, next())));
  } else if (arg == "--swarm-seed") {
    args.swarm_seed = parse_u64(arg, next());
  } else if (arg == "--seeds-file") {
    args.seeds_file = next();
  } else if (arg == "--expect-failure-within") {
    args.expect_within = parse_u64(arg, next());
  } else if (arg == "--expect-invariant") {
    args.expect_invariant = next();
  } else if (arg == "--expect-damaged") {
    args.expect_damaged = parse_u64(arg, next());
  } else if (arg == "--help" || arg == "-h") {
    usage("the deterministic simulator");
  } else {
    usage("unknown argument '" + arg + "'");
  }
}

} // namespace

int main(int argc, char** argv) {
  cli args;
  for (int i = 1; i < argc; ++i)
    parse_option(args, argc, argv, i);
  if (args.expect_within > 0) {
    if (args.opts.plant == sim::planted_bug::none)
      usage("--expect-failure-within needs --plant");
    return expect_failure(args);
  }
  if (!args.seeds_file.empty()) {
    auto seeds = read_seeds(args.seeds_file);
    std::cout << "corpus " << args.seeds_file << ": " << seeds.size()
              << " seeds" << std::endl;
    return report_many(seeds, args);
  }
  if (args.swarm > 0) {
    auto root = args.swarm_seed ? *args.swarm_seed : std::random_device{}();
    std::cout << "swarm-seed=" << root << std::endl;
    sim::prng gen{root};
    std::vector<uint64_t> seeds;
    for (uint64_t i = 0; i < args.swarm; ++i)
      seeds.push_back(gen.next());
    return report_many(seeds, args);
  }
  if (!args.has_seed) {
    std::random_device rd;
    args.opts.seed = (static_cast<uint64_t>(rd()) << 32) | rd();
  }
  return run_one(args);
}
