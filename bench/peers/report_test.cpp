// The peers benchmark's report: which run stands for a system, and how
// ratios and goals are judged over several rounds.

#define BOOST_TEST_MODULE peers_report
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/peers/report.hpp"

using namespace dally::bench::peers;

namespace {

/// A passing run of `tasks` tasks over `e2e_s` seconds, every task `late_ms`
/// late.
run_result make_run(const std::string& system, const std::string& level,
                    uint32_t round, double e2e_s, int64_t late_ms) {
  run_result r;
  r.system = system;
  r.name = system == "dally"            ? "Dally (remote)"
           : system == "dally-embedded" ? "Dally (embedded)"
           : system == "redis"          ? "Redis"
                                        : "beanstalkd";
  r.durability = level;
  r.round = round;
  r.tasks = 1000;
  r.scheduled = r.tasks;
  r.unique = r.tasks;
  r.deliveries = r.tasks;
  r.schedule_s = e2e_s / 2;
  r.e2e_s = e2e_s;
  r.late_us.assign(r.tasks, late_ms * 1000);
  return r;
}

report_context context() {
  report_context ctx;
  ctx.machine = "test machine";
  ctx.versions = "test versions";
  ctx.command = "test command";
  ctx.workload = "test workload";
  ctx.started_utc = "now";
  return ctx;
}

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

/// The table row of `name` in the section of `level` (first match).
std::string row_of(const std::string& md, const std::string& level,
                   const std::string& name) {
  auto section = md.find("### Durability " + level);
  BOOST_REQUIRE(section != std::string::npos);
  auto at = md.find("| " + name + " |", section);
  BOOST_REQUIRE(at != std::string::npos);
  return md.substr(at, md.find('\n', at) - at);
}

} // namespace

BOOST_AUTO_TEST_CASE(one_round_keeps_the_single_run_layout) {
  // Dally 1000 tasks in 1 s, Redis in 2.5 s: 2.5x.
  std::vector<run_result> runs{make_run("dally", "periodic", 1, 1.0, 2),
                               make_run("redis", "periodic", 1, 2.5, 100)};
  auto md = markdown(context(), runs, {});
  BOOST_TEST(!contains(md, "rounds, each running every row once"));
  BOOST_TEST(!contains(md, "| round |"));
  // No embedded row, no footnote about it.
  BOOST_TEST(!contains(md, "The embedded engine runs in the driver's"));
  BOOST_TEST(contains(md, "| Dally (remote) / Redis | 2.50 | 0.02 | – |"));
  BOOST_TEST(contains(md, ">= 2x Redis end to end: **met** (2.50x);"));
  BOOST_TEST(contains(md, "lower p99 lateness than the peer: **met**."));
}

BOOST_AUTO_TEST_CASE(rows_show_the_host_steal_or_that_it_is_unknown) {
  auto dally = make_run("dally", "periodic", 1, 1.0, 2);
  dally.steal_percent = 4.5;
  // Redis's stays unknown (-1), as where /proc/stat cannot be read.
  std::vector<run_result> runs{dally,
                               make_run("redis", "periodic", 1, 2.5, 100)};
  auto md = markdown(context(), runs, {});
  BOOST_TEST(contains(md, "| host steal % |"));
  BOOST_TEST(contains(md, "| 0.0 | 4.5 | 1000 / 0 / 0 / 0 | ok |"));
  BOOST_TEST(contains(md, "| 0.0 | n/a | 1000 / 0 / 0 / 0 | ok |"));
  auto dir = std::filesystem::temp_directory_path() /
             ("peers-steal-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  write_data(dir, runs, {}, "test");
  std::ifstream tsv(dir / "runs.tsv");
  std::string header, first;
  std::getline(tsv, header);
  std::getline(tsv, first);
  BOOST_TEST(header.substr(header.rfind('\t') + 1) == "host_steal_pct");
  BOOST_TEST(first.substr(first.rfind('\t') + 1) == "4.50");
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(rounds_pair_ratios_and_take_the_median) {
  // Per round, Dally / Redis: 1.5, 2.4, 2.2 (median 2.2, met in 2 of 3).
  // Dally's median round by rate is round 2 (1000 tasks in 1.0 s);
  // Redis's is round 3 (in 1.98 s).
  std::vector<run_result> runs{make_run("dally", "sync", 1, 1.2, 5),
                               make_run("redis", "sync", 1, 1.8, 50),
                               make_run("redis", "sync", 2, 2.4, 60),
                               make_run("dally", "sync", 2, 1.0, 4),
                               make_run("dally", "sync", 3, 0.9, 70),
                               make_run("redis", "sync", 3, 1.98, 35)};
  auto md = markdown(context(), runs, {});
  BOOST_TEST(contains(md, "3 rounds, each running every row once"));
  // The table shows each system's median round.
  BOOST_TEST(contains(row_of(md, "sync", "Dally (remote)"),
                      "| Dally (remote) | 2 | 1000 |"));
  BOOST_TEST(contains(row_of(md, "sync", "Redis"), "| Redis | 3 | 1000 |"));
  // Ratios within each round, in round order, and their median.
  BOOST_TEST(contains(md, "| Dally (remote) / Redis | 2.20 (1.50, 2.40, "
                          "2.20) | 0.10 (0.10, 0.07, 2.00) | – |"));
  BOOST_TEST(contains(md, ">= 2x Redis end to end: **met** (median 2.20x; "
                          "by round 1.50x, 2.40x, 2.20x; met in 2 of 3);"));
  // Round 3's p99 was worse than Redis's, the other two better.
  BOOST_TEST(contains(md, "lower p99 lateness than the peer: **met** "
                          "(Dally's p99 over the lower of the peers' p99: "
                          "median 0.10; by round 0.10, 0.07, 2.00; met in 2 "
                          "of 3)."));
  // Every round's figures are listed.
  BOOST_TEST(contains(md, "| Dally (remote) | 833, 5.00 ms, 0.0 µs | 1.0 k, "
                          "4.00 ms, 0.0 µs | 1.1 k, 70.00 ms, 0.0 µs | "
                          "1.0 k |"));
  // The data files list every run with its round.
  auto dir = std::filesystem::temp_directory_path() /
             ("peers-report-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  write_data(dir, runs, {}, "test");
  std::ifstream tsv(dir / "runs.tsv");
  std::string line;
  int rows = 0;
  std::getline(tsv, line);
  BOOST_TEST(contains(line, "durability\tsystem\tround\t"));
  while (std::getline(tsv, line))
    ++rows;
  BOOST_TEST(rows == 6);
  std::ifstream dat(dir / "throughput.dat");
  std::getline(dat, line);
  std::getline(dat, line);
  // Dally's median round: 1000 tasks in 1.0 s.
  BOOST_TEST(line == "sync dally 2000.0 1000.0");
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_failed_round_shows_and_misses_the_goals) {
  auto failed = make_run("dally", "periodic", 2, 0.2, 1);
  failed.failures.push_back("3 of 1000 tasks never received");
  std::vector<run_result> runs{make_run("dally", "periodic", 1, 0.2, 1),
                               make_run("redis", "periodic", 1, 2.0, 50),
                               failed,
                               make_run("redis", "periodic", 2, 2.0, 50)};
  auto md = markdown(context(), runs, {});
  BOOST_TEST(
    contains(row_of(md, "periodic", "Dally (remote)"), "| 2 | 1000 |"));
  BOOST_TEST(contains(row_of(md, "periodic", "Dally (remote)"), "**FAILED**"));
  BOOST_TEST(contains(md, ">= 2x Redis end to end: **missed**"));
  BOOST_TEST(contains(md, "lower p99 lateness than the peer: **missed**"));
  BOOST_TEST(contains(md, "- **FAILED** Dally (remote) (periodic, round 2): "
                          "3 of 1000 tasks never received"));
}

BOOST_AUTO_TEST_CASE(an_embedded_row_comes_with_its_footnote) {
  std::vector<run_result> runs{make_run("dally-embedded", "sync", 1, 1.0, 2),
                               make_run("redis", "sync", 1, 2.0, 100)};
  auto md = markdown(context(), runs, {});
  BOOST_TEST(contains(md, "The embedded engine runs in the driver's"));
  BOOST_TEST(contains(md, "| Dally (embedded) / Redis | 2.00 | 0.02 | – |"));
  // The goals are the remote row's: none without it.
  BOOST_TEST(!contains(md, "Goals at sync"));
}
