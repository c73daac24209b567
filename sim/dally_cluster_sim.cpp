// dally-cluster-sim: the simulator of the coordinator's Raft group.
//
//   dally-cluster-sim [--seed N] [--plant BUG] [--verbose] [--twice]
//     One run (with --twice two, which must give the same hash). Without
//     --seed a random one. Prints the parameters drawn from the seed and
//     `hash=<hex>`; on a violation the invariant, the last events and the
//     command that reproduces it, and exits 1.
//   dally-cluster-sim --swarm K [--swarm-seed S] [--plant BUG]
//     K seeds drawn from S (random when not given); exits 1 if any failed.
//   dally-cluster-sim --seeds-file FILE [--twice]
//     The seeds listed in FILE (one per line, `#` comments).
//   dally-cluster-sim --plant BUG --expect-failure-within K
//       [--first-seed F] [--expect-invariant NAME]
//     Seeds F..K (F is 1 unless given) with BUG planted; exits 0 at the
//     first seed that fails (on NAME, if given), 1 if none does or one
//     fails on another invariant.

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "sim/cluster_sim.hpp"
#include "sim/prng.hpp"

namespace {

using namespace dally;

[[noreturn]] void usage(const std::string& why) {
  std::string bugs;
  for (auto bug : sim::cluster_bugs())
    if (bug != sim::cluster_bug::none)
      bugs += (bugs.empty() ? "" : ", ") + sim::cluster_bug_name(bug);
  std::cerr << "dally-cluster-sim: " << why << "\n"
            << "usage: dally-cluster-sim [--seed N] [--plant BUG] "
               "[--verbose] [--twice]\n"
            << "       dally-cluster-sim --swarm K [--swarm-seed S] "
               "[--plant BUG]\n"
            << "       dally-cluster-sim --seeds-file FILE [--twice]\n"
            << "       dally-cluster-sim --plant BUG --expect-failure-within "
               "K [--first-seed F] [--expect-invariant NAME]\n"
            << "BUG: " << bugs << "\n";
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

struct cli {
  sim::cluster_sim_options opts;
  bool has_seed = false;
  bool twice = false;
  uint64_t swarm = 0;
  std::optional<uint64_t> swarm_seed;
  uint64_t expect_within = 0;
  uint64_t first_seed = 1;
  std::string expect_invariant;
  std::string seeds_file;
};

cli parse(int argc, char** argv) {
  cli args;
  std::vector<std::string> a(argv + 1, argv + argc);
  for (size_t i = 0; i < a.size(); ++i) {
    auto value = [&]() -> const std::string& {
      if (i + 1 >= a.size())
        usage(a[i] + " needs a value");
      return a[++i];
    };
    if (a[i] == "--seed") {
      args.opts.seed = parse_u64(a[i], value());
      args.has_seed = true;
    } else if (a[i] == "--plant") {
      auto bug = sim::parse_cluster_bug(value());
      if (!bug || *bug == sim::cluster_bug::none)
        usage("unknown bug '" + a[i] + "'");
      args.opts.plant = *bug;
    } else if (a[i] == "--verbose") {
      args.opts.verbose = true;
    } else if (a[i] == "--twice") {
      args.twice = true;
    } else if (a[i] == "--swarm") {
      args.swarm = parse_u64(a[i], value());
    } else if (a[i] == "--swarm-seed") {
      args.swarm_seed = parse_u64(a[i], value());
    } else if (a[i] == "--expect-failure-within") {
      args.expect_within = parse_u64(a[i], value());
    } else if (a[i] == "--first-seed") {
      args.first_seed = parse_u64(a[i], value());
    } else if (a[i] == "--expect-invariant") {
      args.expect_invariant = value();
    } else if (a[i] == "--seeds-file") {
      args.seeds_file = value();
    } else {
      usage("unknown argument '" + a[i] + "'");
    }
  }
  if (args.expect_within > 0 && args.opts.plant == sim::cluster_bug::none)
    usage("--expect-failure-within needs --plant");
  return args;
}

std::string repro(const sim::cluster_sim_options& opts) {
  std::string out = "dally-cluster-sim --seed " + std::to_string(opts.seed);
  if (opts.plant != sim::cluster_bug::none)
    out += " --plant " + sim::cluster_bug_name(opts.plant);
  return out;
}

void print_params(const sim::cluster_sim_result& res) {
  const auto& p = res.params;
  std::cout << "voters=" << p.voters << " learner=" << p.learner
            << " shards=" << p.shard_count
            << " snapshot_every=" << p.snapshot_every
            << " max_batch=" << p.max_batch
            << " drop_ppm=" << p.drop_per_million
            << " dup_ppm=" << p.duplicate_per_million
            << " max_delay_ms=" << p.max_delay_ms
            << " crash_ppm=" << p.crash_ppm
            << " partition_ppm=" << p.partition_ppm
            << " heal_ppm=" << p.heal_ppm << " pause_ppm=" << p.pause_ppm
            << " propose_ppm=" << p.propose_ppm
            << " fault_phase_ms=" << p.fault_phase_ms << '\n';
}

void print_failure(const sim::cluster_sim_options& opts,
                   const sim::cluster_sim_result& res) {
  std::cout << "VIOLATION " << res.failure->invariant << ": "
            << res.failure->detail << "\nlast events:\n";
  for (const auto& line : res.last_events)
    std::cout << "  " << line << '\n';
  std::cout << "reproduce: " << repro(opts) << '\n';
}

/// One seed, reported in full.
int run_one(const cli& args) {
  std::cout << "seed=" << args.opts.seed << std::endl;
  auto res = sim::run_cluster_simulation(args.opts);
  print_params(res);
  if (args.twice) {
    auto again = sim::run_cluster_simulation(args.opts);
    if (again.hash != res.hash) {
      std::cout << "VIOLATION determinism: hashes " << res.hash << " and "
                << again.hash << "\nreproduce: " << repro(args.opts)
                << " --twice\n";
      return 1;
    }
  }
  std::cout << "steps=" << res.steps << " messages=" << res.messages
            << " committed=" << res.committed << " elections=" << res.elections
            << " crashes=" << res.crashes
            << " converged_after_ms=" << res.converged_after_ms << '\n';
  if (res.failure) {
    print_failure(args.opts, res);
    return 1;
  }
  std::cout << "hash=" << res.hash << '\n';
  return 0;
}

/// Many seeds in this process; prints each failing one.
int run_many(const cli& args, const std::vector<uint64_t>& seeds) {
  auto start = std::chrono::steady_clock::now();
  uint64_t failed = 0;
  for (auto seed : seeds) {
    auto opts = args.opts;
    opts.seed = seed;
    auto res = sim::run_cluster_simulation(opts);
    bool bad = res.failure.has_value();
    if (!bad && args.twice)
      bad = sim::run_cluster_simulation(opts).hash != res.hash;
    if (bad) {
      ++failed;
      std::cout << "FAILED seed=" << seed << " ("
                << (res.failure ? res.failure->invariant : "determinism")
                << "): " << repro(opts) << '\n';
    }
  }
  std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  std::cout << seeds.size() << " seeds, " << failed << " failed, "
            << took.count() << " s\n";
  return failed == 0 ? 0 : 1;
}

std::vector<uint64_t> read_seeds(const std::string& path) {
  std::ifstream in{path};
  if (!in)
    usage("cannot read " + path);
  std::vector<uint64_t> out;
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos)
      continue;
    auto last = line.find_last_not_of(" \t\r");
    out.push_back(parse_u64(path, line.substr(first, last - first + 1)));
  }
  return out;
}

/// The planted bug's self-test: the first failing seed of 1..K must fail
/// on the expected invariant.
int expect_failure(const cli& args) {
  for (auto seed = args.first_seed; seed <= args.expect_within; ++seed) {
    auto opts = args.opts;
    opts.seed = seed;
    auto res = sim::run_cluster_simulation(opts);
    if (!res.failure)
      continue;
    std::cout << "seed " << seed << " found "
              << sim::cluster_bug_name(opts.plant) << ": "
              << res.failure->invariant << ": " << res.failure->detail << '\n';
    if (!args.expect_invariant.empty() &&
        res.failure->invariant != args.expect_invariant) {
      std::cout << "expected a violation of " << args.expect_invariant << '\n';
      return 1;
    }
    return 0;
  }
  std::cout << "no seed of " << args.first_seed << ".." << args.expect_within
            << " found " << sim::cluster_bug_name(args.opts.plant) << '\n';
  return 1;
}

} // namespace

int main(int argc, char** argv) {
  auto args = parse(argc, argv);
  if (args.expect_within > 0)
    return expect_failure(args);
  if (!args.seeds_file.empty())
    return run_many(args, read_seeds(args.seeds_file));
  if (args.swarm > 0) {
    auto swarm_seed =
      args.swarm_seed ? *args.swarm_seed : uint64_t{std::random_device{}()};
    std::cout << "swarm-seed=" << swarm_seed << std::endl;
    sim::prng gen{swarm_seed};
    std::vector<uint64_t> seeds;
    for (uint64_t i = 0; i < args.swarm; ++i)
      seeds.push_back(gen.next());
    return run_many(args, seeds);
  }
  if (!args.has_seed)
    args.opts.seed = std::random_device{}();
  return run_one(args);
}
