#pragma once

// Results of dally-peers-bench and how they are written: the markdown
// summary, data files and the gnuplot script that draws the plots.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace dally::bench::peers {

/// One system at one durability level, end to end.
struct run_result {
  /// --systems name ("redis") and row label ("Redis").
  std::string system;
  std::string name;
  std::string durability;
  /// What the CPU and RSS figures cover.
  std::string usage_scope;
  /// Which of --rounds this run was (1-based).
  uint32_t round = 1;
  uint64_t tasks = 0;
  /// Reasons the row failed (lost or early tasks, errors); empty: passed.
  std::vector<std::string> failures;
  /// Remarks that do not fail the row (e.g. a server that needed SIGKILL).
  std::vector<std::string> notes;
  uint64_t scheduled = 0;
  uint64_t unique = 0;
  uint64_t deliveries = 0;
  uint64_t missing = 0;
  uint64_t early = 0;
  /// Bodies that did not decode, or whose due time was not the one sent.
  uint64_t malformed = 0;
  double schedule_s = 0;
  double e2e_s = 0;
  /// Lateness of each received task in µs (first receive - due), sorted.
  std::vector<int64_t> late_us;
  double server_cpu_s = 0;
  /// The driver's CPU (producers, consumers, the Redis mover); for the
  /// embedded engine the same process as the server.
  double client_cpu_s = 0;
  uint64_t peak_rss_kib = 0;
  /// The host's steal time during the run, in percent of all CPU time
  /// (bench/host_steal.hpp); negative if unknown.
  double steal_percent = -1;

  bool ok() const { return failures.empty(); }
  double schedule_rate() const;
  double e2e_rate() const;
  /// Nearest-rank percentile of the lateness in µs (0 without samples).
  int64_t late_percentile_us(double p) const;
};

/// RSS per pending task of one system.
struct pending_result {
  std::string system;
  std::string name;
  std::string durability;
  std::string usage_scope;
  std::vector<std::string> failures;
  std::vector<std::string> notes;
  uint64_t tasks = 0;
  uint64_t warmup = 0;
  int64_t due_s = 0;
  uint64_t rss_before_kib = 0;
  uint64_t rss_after_kib = 0;
  double load_s = 0;

  bool ok() const { return failures.empty(); }
  double bytes_per_task() const;
};

/// What the report says about the run besides the results.
struct report_context {
  std::string machine;
  std::string versions;
  std::string command;
  std::string workload;
  std::string started_utc;
  double elapsed_s = 0;
};

/// The markdown summary: a table per durability level with ratios Dally /
/// peer and the goals, the RSS table, correctness. With more than one
/// round, each system's table row and plots are its median round's run,
/// a table gives every round, and ratios and goals are medians of the
/// ratios within each round.
std::string markdown(const report_context& ctx,
                     const std::vector<run_result>& runs,
                     const std::vector<pending_result>& pending);

/// Writes throughput.dat, lateness-LEVEL-SYSTEM.dat (CDF points), rss.dat
/// (of each system's median round), runs.tsv (every run) and plots.gp
/// (gnuplot: throughput.png, lateness-LEVEL.png, rss.png, drawn in `dir`)
/// into `dir`.
void write_data(const std::filesystem::path& dir,
                const std::vector<run_result>& runs,
                const std::vector<pending_result>& pending,
                const std::string& title);

} // namespace dally::bench::peers
