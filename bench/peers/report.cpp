#include "bench/peers/report.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "bench/host_steal.hpp"
#include "bench/peers/peer.hpp"

namespace dally::bench::peers {

namespace {

std::string fixed(double x, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << x;
  return out.str();
}

std::string rate_str(double per_s) {
  if (per_s <= 0 || !std::isfinite(per_s))
    return "–";
  if (per_s >= 1e6)
    return fixed(per_s / 1e6, 2) + " M";
  if (per_s >= 1e3)
    return fixed(per_s / 1e3, 1) + " k";
  return fixed(per_s, 0);
}

std::string ms_str(int64_t us) {
  return fixed(static_cast<double>(us) / 1000.0, 2);
}

/// x / y with two digits, or a dash when either is missing.
std::string ratio_str(double x, double y) {
  if (x <= 0 || y <= 0 || !std::isfinite(x) || !std::isfinite(y))
    return "–";
  return fixed(x / y, 2);
}

/// "dally-embedded" -> "dally-embedded": file names use the --systems name.
std::string cdf_file(const run_result& r) {
  return "lateness-" + r.durability + "-" + r.system + ".dat";
}

const pending_result* pending_of(const std::vector<pending_result>& pending,
                                 const std::string& system) {
  for (auto& p : pending)
    if (p.system == system && p.ok())
      return &p;
  return nullptr;
}

std::vector<std::string> levels_of(const std::vector<run_result>& runs) {
  std::vector<std::string> out;
  for (auto& r : runs)
    if (std::find(out.begin(), out.end(), r.durability) == out.end())
      out.push_back(r.durability);
  return out;
}

std::vector<std::string> systems_of(const std::vector<run_result>& runs) {
  std::vector<std::string> out;
  for (auto& r : runs)
    if (std::find(out.begin(), out.end(), r.system) == out.end())
      out.push_back(r.system);
  return out;
}

std::vector<uint32_t> rounds_of(const std::vector<run_result>& runs) {
  std::set<uint32_t> out;
  for (auto& r : runs)
    out.insert(r.round);
  return {out.begin(), out.end()};
}

const run_result* find_run(const std::vector<run_result>& runs,
                           const std::string& system, const std::string& level,
                           uint32_t round) {
  for (auto& r : runs)
    if (r.system == system && r.durability == level && r.round == round)
      return &r;
  return nullptr;
}

/// The run that stands for `system` at `level`: a failed one if any round
/// failed (so that the table shows it), else the median round by end-to-end
/// rate (the lower of the middle two for an even count).
const run_result* representative(const std::vector<run_result>& runs,
                                 const std::string& system,
                                 const std::string& level) {
  std::vector<const run_result*> all;
  for (auto& r : runs)
    if (r.system == system && r.durability == level) {
      if (!r.ok())
        return &r;
      all.push_back(&r);
    }
  if (all.empty())
    return nullptr;
  std::sort(all.begin(), all.end(),
            [](auto* x, auto* y) { return x->e2e_rate() < y->e2e_rate(); });
  return all[(all.size() - 1) / 2];
}

/// Each system's representative at each level, in the runs' order.
std::vector<const run_result*>
representatives(const std::vector<run_result>& runs) {
  std::vector<const run_result*> out;
  for (auto& level : levels_of(runs))
    for (auto& system : systems_of(runs))
      if (auto* r = representative(runs, system, level))
        out.push_back(r);
  return out;
}

const run_result* find_rep(const std::vector<const run_result*>& reps,
                           const std::string& system,
                           const std::string& level) {
  for (auto* r : reps)
    if (r->system == system && r->durability == level)
      return r;
  return nullptr;
}

double median_of(std::vector<double> xs) {
  if (xs.empty())
    return 0;
  std::sort(xs.begin(), xs.end());
  auto n = xs.size();
  return n % 2 == 1 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

/// `f(dally run, peer run)` for every round in which both ran and passed.
template<class F>
std::vector<double> per_round(const std::vector<run_result>& runs,
                              const std::string& dally, const std::string& peer,
                              const std::string& level, F f) {
  std::vector<double> out;
  for (auto round : rounds_of(runs)) {
    auto* d = find_run(runs, dally, level, round);
    auto* o = find_run(runs, peer, level, round);
    if (d != nullptr && o != nullptr && d->ok() && o->ok())
      out.push_back(f(*d, *o));
  }
  return out;
}

/// The median of per-round values, and with more than one round the values
/// themselves: "1.87 (1.60, 1.87, 2.10)".
std::string median_str(const std::vector<double>& xs) {
  if (xs.empty())
    return "–";
  auto out = fixed(median_of(xs), 2);
  if (xs.size() > 1) {
    out += " (";
    for (size_t i = 0; i < xs.size(); ++i)
      out += (i > 0 ? ", " : "") + fixed(xs[i], 2);
    out += ")";
  }
  return out;
}

double e2e_ratio(const run_result& d, const run_result& o) {
  return o.e2e_rate() > 0 ? d.e2e_rate() / o.e2e_rate() : 0;
}

double p99_ratio(const run_result& d, const run_result& o) {
  auto dp = static_cast<double>(d.late_percentile_us(0.99));
  auto op = static_cast<double>(o.late_percentile_us(0.99));
  if (op > 0)
    return dp / op;
  return dp > 0 ? std::numeric_limits<double>::infinity() : 1;
}

std::string setup_of(const std::string& level) {
  if (level == "sync")
    return "Dally `--durability sync`, Redis `appendfsync always`, "
           "beanstalkd `-f 0`";
  return "Dally `--durability periodic`, Redis `appendfsync everysec`, "
         "beanstalkd `-f 50`";
}

std::string gp_quote(const std::string& s) {
  return "\"" + s + "\"";
}

std::string num_or_nan(double x) {
  if (x <= 0 || !std::isfinite(x))
    return "NaN";
  return fixed(x, 1);
}

} // namespace

double run_result::schedule_rate() const {
  return schedule_s > 0 ? static_cast<double>(scheduled) / schedule_s : 0;
}

double run_result::e2e_rate() const {
  return e2e_s > 0 && ok() ? static_cast<double>(tasks) / e2e_s : 0;
}

int64_t run_result::late_percentile_us(double p) const {
  if (late_us.empty())
    return 0;
  auto rank =
    static_cast<size_t>(std::ceil(p * static_cast<double>(late_us.size())));
  return late_us[std::clamp<size_t>(rank, 1, late_us.size()) - 1];
}

double pending_result::bytes_per_task() const {
  if (tasks == 0 || !ok())
    return 0;
  return (static_cast<double>(rss_after_kib) -
          static_cast<double>(rss_before_kib)) *
         1024.0 / static_cast<double>(tasks);
}

std::string markdown(const report_context& ctx,
                     const std::vector<run_result>& runs,
                     const std::vector<pending_result>& pending) {
  std::ostringstream md;
  md << "Machine: " << ctx.machine << ".\n\n"
     << "Versions: " << ctx.versions << ".\n\n"
     << "Run: " << ctx.started_utc << ", " << fixed(ctx.elapsed_s, 0)
     << " s. Command: `" << ctx.command << "`.\n\n"
     << "Workload: " << ctx.workload << "\n\n"
     << "Host steal: the share of all CPU time that the host took from this "
        "machine's vCPUs during the row (/proc/stat), for everything on "
        "the machine. The host deschedules a vCPU for milliseconds at a "
        "time, so a row with more of it is slower and its tail longer, "
        "whatever the system.\n\n";
  auto rounds = rounds_of(runs);
  auto reps = representatives(runs);
  bool several = rounds.size() > 1;
  if (several)
    md << rounds.size()
       << " rounds, each running every row once (the order of the systems "
          "reversed in every other round). Each table shows every system's "
          "median round by end-to-end rate (a failed round instead, if any "
          "failed); ratios and goals are the medians "
          "of the ratios within each round, followed by those ratios in "
          "round order.\n\n";
  for (auto& level : levels_of(runs)) {
    md << "### Durability " << level << "\n\n"
       << setup_of(level) << ".\n\n"
       << "| system | " << (several ? "round | " : "")
       << "tasks | schedule tasks/s | end-to-end tasks/s | "
          "lateness p50 ms | p99 ms | p99.9 ms | max ms | server CPU s | "
          "server CPU µs per task | driver CPU s | peak RSS MiB | host "
          "steal % | received / missing / early / redelivered | result |\n"
       << "|---|" << (several ? "---:|" : "")
       << "---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
          "---|\n";
    for (auto* rp : reps) {
      auto& r = *rp;
      if (r.durability != level)
        continue;
      bool embedded = r.system == "dally-embedded";
      md << "| " << r.name << " | ";
      if (several)
        md << r.round << " | ";
      md << r.tasks << " | " << rate_str(r.schedule_rate()) << " | "
         << rate_str(r.e2e_rate()) << " | "
         << (r.late_us.empty() ? "–" : ms_str(r.late_percentile_us(0.5)))
         << " | "
         << (r.late_us.empty() ? "–" : ms_str(r.late_percentile_us(0.99)))
         << " | "
         << (r.late_us.empty() ? "–" : ms_str(r.late_percentile_us(0.999)))
         << " | " << (r.late_us.empty() ? "–" : ms_str(r.late_us.back()))
         << " | " << fixed(r.server_cpu_s, 1) << (embedded ? "*" : "") << " | "
         << fixed(1e6 * r.server_cpu_s /
                    static_cast<double>(std::max<uint64_t>(1, r.tasks)),
                  1)
         << (embedded ? "*" : "") << " | "
         << (embedded ? std::string{"(in *)"} : fixed(r.client_cpu_s, 1))
         << " | " << fixed(static_cast<double>(r.peak_rss_kib) / 1024, 1)
         << (embedded ? "*" : "") << " | " << bench::steal_text(r.steal_percent)
         << " | " << r.unique << " / " << r.missing << " / " << r.early << " / "
         << r.deliveries - r.unique << " | " << (r.ok() ? "ok" : "**FAILED**")
         << " |\n";
    }
    md << '\n';
    if (find_rep(reps, "dally-embedded", level) != nullptr)
      md << "\\* The embedded engine runs in the driver's process: its CPU "
            "and RSS include the producers and consumers.\n\n";
    if (several) {
      md << "Every round: end-to-end tasks/s, p99 lateness ms and server CPU "
            "µs per task.\n\n| system |";
      for (auto round : rounds)
        md << " round " << round << " |";
      md << " median tasks/s |\n|---|";
      for (size_t i = 0; i < rounds.size(); ++i)
        md << "---:|";
      md << "---:|\n";
      for (auto& system : systems_of(runs)) {
        auto* rep = find_rep(reps, system, level);
        if (rep == nullptr)
          continue;
        md << "| " << rep->name << " |";
        std::vector<double> rates;
        for (auto round : rounds) {
          auto* r = find_run(runs, system, level, round);
          if (r == nullptr) {
            md << " – |";
          } else if (!r->ok()) {
            md << " **FAILED** |";
          } else {
            rates.push_back(r->e2e_rate());
            md << ' ' << rate_str(r->e2e_rate()) << ", "
               << ms_str(r->late_percentile_us(0.99)) << " ms, "
               << fixed(1e6 * r->server_cpu_s /
                          static_cast<double>(std::max<uint64_t>(1, r->tasks)),
                        1)
               << " µs |";
          }
        }
        md << ' ' << rate_str(median_of(rates)) << " |\n";
      }
      md << '\n';
    }
    // Ratios of each Dally row to each peer.
    std::vector<const run_result*> dallies;
    std::vector<const run_result*> others;
    for (auto* r : reps) {
      if (r->durability != level)
        continue;
      (r->system.rfind("dally", 0) == 0 ? dallies : others).push_back(r);
    }
    if (!dallies.empty() && !others.empty()) {
      md << "| Dally / peer | end-to-end throughput (higher is better) | p99 "
            "lateness (lower is better) | RSS per pending task (lower is "
            "better) |\n"
         << "|---|---:|---:|---:|\n";
      for (auto* d : dallies)
        for (auto* o : others) {
          auto* dp = pending_of(pending, d->system);
          auto* op = pending_of(pending, o->system);
          md << "| " << d->name << " / " << o->name << " | "
             << median_str(
                  per_round(runs, d->system, o->system, level, e2e_ratio))
             << " | "
             << median_str(
                  per_round(runs, d->system, o->system, level, p99_ratio))
             << " | "
             << (dp && op
                   ? ratio_str(dp->bytes_per_task(), op->bytes_per_task())
                   : "–")
             << " |\n";
        }
      md << '\n';
    }
    // The goals, judged on the remote row (a client and a server, as for
    // the peers), round by round: a failed row in any round misses them.
    auto all_ok = [&](const std::string& system) {
      bool any = false;
      for (auto& r : runs)
        if (r.system == system && r.durability == level) {
          any = true;
          if (!r.ok())
            return false;
        }
      return any;
    };
    auto has = [&](const std::string& system) {
      return find_rep(reps, system, level) != nullptr;
    };
    if (has("dally") && (has("beanstalkd") || has("redis"))) {
      md << "Goals at " << level << " (Dally remote):";
      auto verdict = [](bool met) { return met ? "met" : "missed"; };
      // "2.50x", or over rounds "median 2.20x; by round 1.50x, 2.40x,
      // 2.20x; met in 2 of 3".
      auto judged = [&](const std::vector<double>& xs, const char* unit,
                        auto pred) {
        if (xs.empty())
          return std::string{"–"};
        if (!several)
          return fixed(xs.front(), 2) + unit;
        auto out = "median " + fixed(median_of(xs), 2) + unit + "; by round";
        for (size_t i = 0; i < xs.size(); ++i)
          out += (i > 0 ? ", " : " ") + fixed(xs[i], 2) + unit;
        auto k = std::count_if(xs.begin(), xs.end(), pred);
        return out + "; met in " + std::to_string(k) + " of " +
               std::to_string(rounds.size());
      };
      for (auto [peer, label, factor] :
           {std::tuple{"beanstalkd", "beanstalkd", 3.0},
            std::tuple{"redis", "Redis", 2.0}}) {
        if (!has(peer))
          continue;
        auto xs = per_round(runs, "dally", peer, level, e2e_ratio);
        auto pred = [f = factor](double x) { return x >= f; };
        bool met = all_ok("dally") && all_ok(peer) &&
                   xs.size() == rounds.size() && median_of(xs) >= factor;
        md << " >= " << fixed(factor, 0) << "x " << label << " end to end: **"
           << verdict(met) << "** (" << judged(xs, "x", pred) << ");";
      }
      // Per round, Dally's p99 against the lower of the peers'.
      std::vector<double> worst;
      for (auto round : rounds) {
        auto* d = find_run(runs, "dally", level, round);
        double x = 0;
        bool seen = false;
        for (auto* peer : {"beanstalkd", "redis"}) {
          auto* o = find_run(runs, peer, level, round);
          if (o == nullptr || d == nullptr || !d->ok() || !o->ok())
            continue;
          x = std::max(x, p99_ratio(*d, *o));
          seen = true;
        }
        if (seen)
          worst.push_back(x);
      }
      bool lower = all_ok("dally") && worst.size() == rounds.size() &&
                   median_of(worst) < 1;
      for (auto* peer : {"beanstalkd", "redis"})
        if (has(peer))
          lower = lower && all_ok(peer);
      md << " lower p99 lateness than "
         << (has("beanstalkd") && has("redis") ? "both" : "the peer") << ": **"
         << verdict(lower) << "**";
      if (several)
        md << " (Dally's p99 over the lower of the peers' p99: "
           << judged(worst, "", [](double x) { return x < 1; }) << ")";
      md << ".\n\n";
    }
  }
  if (!pending.empty()) {
    auto& first = pending.front();
    md << "### Memory per pending task\n\n"
       << "A fresh server per row, durability " << first.durability << ": "
       << first.warmup << " warm-up tasks, RSS (VmRSS) before; then "
       << first.tasks << " tasks due " << first.due_s << " s to "
       << first.due_s + 600
       << " s out, 2 s idle, RSS after; per task = (after - before) / "
          "tasks.\n\n"
       << "| system | measured | RSS before MiB | RSS after MiB | bytes per "
          "pending task | load tasks/s | result |\n"
       << "|---|---|---:|---:|---:|---:|---|\n";
    for (auto& p : pending)
      md << "| " << p.name << " | " << p.usage_scope << " | "
         << fixed(static_cast<double>(p.rss_before_kib) / 1024, 1) << " | "
         << fixed(static_cast<double>(p.rss_after_kib) / 1024, 1) << " | "
         << (p.ok() ? fixed(p.bytes_per_task(), 1) : "–") << " | "
         << (p.ok() && p.load_s > 0
               ? rate_str(static_cast<double>(p.tasks) / p.load_s)
               : "–")
         << " | " << (p.ok() ? "ok" : "**FAILED**") << " |\n";
    md << '\n';
  }
  bool failed = false;
  std::ostringstream problems;
  for (auto& r : runs) {
    auto where = r.name + " (" + r.durability +
                 (several ? ", round " + std::to_string(r.round) : "") + ")";
    for (auto& f : r.failures)
      problems << "- **FAILED** " << where << ": " << f << '\n';
    for (auto& n : r.notes)
      problems << "- note: " << where << ": " << n << '\n';
    failed = failed || !r.ok();
  }
  for (auto& p : pending) {
    for (auto& f : p.failures)
      problems << "- **FAILED** " << p.name << " (memory): " << f << '\n';
    for (auto& n : p.notes)
      problems << "- note: " << p.name << " (memory): " << n << '\n';
    failed = failed || !p.ok();
  }
  md << "Correctness: "
     << (failed ? "**some rows FAILED** (below)."
                : "every task of every row was received at least once and "
                  "none before its due time.")
     << '\n';
  if (!problems.str().empty())
    md << '\n' << problems.str();
  return md.str();
}

void write_data(const std::filesystem::path& dir,
                const std::vector<run_result>& runs,
                const std::vector<pending_result>& pending,
                const std::string& title) {
  auto levels = levels_of(runs);
  auto systems = systems_of(runs);
  auto reps = representatives(runs);
  std::map<std::string, std::string> names;
  for (auto& r : runs)
    names[r.system] = r.name;
  for (auto& p : pending)
    names[p.system] = p.name;
  {
    std::ofstream tsv(dir / "runs.tsv");
    tsv << "durability\tsystem\tround\tok\ttasks\tschedule_per_s\te2e_per_s\t"
           "p50_ms\tp99_ms\tp999_ms\tmax_ms\tserver_cpu_s\tdriver_cpu_s\t"
           "peak_rss_kib\treceived\tmissing\tearly\tredelivered\t"
           "host_steal_pct\n";
    for (auto& r : runs)
      tsv << r.durability << '\t' << r.system << '\t' << r.round << '\t'
          << (r.ok() ? 1 : 0) << '\t' << r.tasks << '\t'
          << fixed(r.schedule_rate(), 1) << '\t' << fixed(r.e2e_rate(), 1)
          << '\t' << ms_str(r.late_percentile_us(0.5)) << '\t'
          << ms_str(r.late_percentile_us(0.99)) << '\t'
          << ms_str(r.late_percentile_us(0.999)) << '\t'
          << (r.late_us.empty() ? "0" : ms_str(r.late_us.back())) << '\t'
          << fixed(r.server_cpu_s, 3) << '\t' << fixed(r.client_cpu_s, 3)
          << '\t' << r.peak_rss_kib << '\t' << r.unique << '\t' << r.missing
          << '\t' << r.early << '\t' << r.deliveries - r.unique << '\t'
          << fixed(r.steal_percent, 2) << '\n';
  }
  // Lateness CDFs: a dense grid of quantiles, finer in the tail.
  for (auto* rp : reps) {
    auto& r = *rp;
    std::ofstream out(dir / cdf_file(r));
    out << "# " << r.name << ", durability " << r.durability
        << ": lateness_ms fraction_of_tasks_at_most (" << r.late_us.size()
        << " tasks)\n";
    if (r.late_us.empty())
      continue;
    auto n = static_cast<double>(r.late_us.size());
    std::vector<double> qs;
    for (int i = 1; i <= 1000; ++i)
      qs.push_back(i / 1000.0);
    for (double e = 3.05; e <= std::log10(n) + 1e-9; e += 0.05)
      qs.push_back(1 - std::pow(10.0, -e));
    std::sort(qs.begin(), qs.end());
    for (auto q : qs) {
      auto rank = static_cast<size_t>(std::ceil(q * n));
      auto v = r.late_us[std::clamp<size_t>(rank, 1, r.late_us.size()) - 1];
      out << fixed(static_cast<double>(v) / 1000.0, 3) << ' ' << fixed(q, 7)
          << '\n';
    }
  }
  {
    std::ofstream out(dir / "throughput.dat");
    out << "# durability system schedule_tasks_per_s e2e_tasks_per_s "
           "(0: the row failed)\n";
    for (auto* r : reps)
      out << r->durability << ' ' << r->system << ' '
          << fixed(r->ok() ? r->schedule_rate() : 0, 1) << ' '
          << fixed(r->e2e_rate(), 1) << '\n';
  }
  {
    std::ofstream out(dir / "rss.dat");
    out << "# system bytes_per_pending_task (0: the row failed)\n";
    for (auto& p : pending)
      out << p.system << ' ' << fixed(p.bytes_per_task(), 1) << '\n';
  }
  // The gnuplot script, with its data inline (datablocks) except for the
  // CDFs, which it reads from their files.
  std::ofstream gp(dir / "plots.gp");
  gp << "# Drawn by scripts/bench-peers.sh: cd " << dir.string()
     << " && gnuplot plots.gp\n"
     << "set terminal pngcairo size 1100,480 font ',10'\n"
     << "set grid ytics\n"
     << "set key top left\n";
  if (!runs.empty()) {
    auto block = [&](const std::string& name, bool e2e) {
      gp << "$" << name << " << EOD\ndurability";
      for (auto& s : systems)
        gp << ' ' << gp_quote(names[s]);
      gp << '\n';
      for (auto& level : levels) {
        gp << level;
        for (auto& s : systems) {
          auto* r = find_rep(reps, s, level);
          double v = 0;
          if (r != nullptr && r->ok())
            v = e2e ? r->e2e_rate() : r->schedule_rate();
          gp << ' ' << num_or_nan(v);
        }
        gp << '\n';
      }
      gp << "EOD\n";
    };
    block("schedule", false);
    block("e2e", true);
    gp << "set output 'throughput.png'\n"
       << "set multiplot layout 1,2 title " << gp_quote(title) << "\n"
       << "set style data histograms\n"
       << "set style histogram clustered gap 1\n"
       << "set style fill solid 0.85 border -1\n"
       << "set ylabel 'tasks/s'\n"
       << "set yrange [0:*]\n"
       // Room above the tallest bar for the key.
       << "set offsets 0, 0, graph 0.3, 0\n"
       << "set title 'schedule throughput (acknowledged by the server)'\n"
       << "plot for [i=2:" << systems.size() + 1
       << "] $schedule using i:xtic(1) title columnheader(i)\n"
       << "set title 'end-to-end throughput (first schedule to last ack)'\n"
       << "plot for [i=2:" << systems.size() + 1
       << "] $e2e using i:xtic(1) title columnheader(i)\n"
       << "unset multiplot\n"
       << "set offsets 0, 0, 0, 0\n"
       << "set style data lines\n"
       << "set autoscale\n";
    for (auto& level : levels) {
      std::vector<const run_result*> rows;
      for (auto* r : reps)
        if (r->durability == level && !r->late_us.empty())
          rows.push_back(r);
      if (rows.empty())
        continue;
      auto plot_all = [&](const std::string& ycol) {
        gp << "plot ";
        for (size_t i = 0; i < rows.size(); ++i)
          gp << (i > 0 ? ", " : "") << gp_quote(cdf_file(*rows[i]))
             << " using ($1 < 0.001 ? 0.001 : $1):" << ycol
             << " with lines lw 2 title " << gp_quote(rows[i]->name);
        gp << '\n';
      };
      gp << "set output 'lateness-" << level << ".png'\n"
         << "set multiplot layout 1,2 title "
         << gp_quote(title + ", lateness at durability " + level) << "\n"
         << "set logscale x\n"
         << "set xlabel 'lateness (receive - due), ms'\n"
         << "set title 'CDF'\n"
         << "set ylabel 'fraction of tasks at most this late'\n"
         << "unset logscale y\n"
         << "set yrange [0:1]\n"
         << "set key bottom right\n";
      plot_all("2");
      gp << "set title 'tail (1 - CDF)'\n"
         << "set ylabel 'fraction of tasks later than this'\n"
         << "set logscale y\n"
         << "set yrange [*:1]\n"
         << "set key top right\n";
      plot_all("(1 - $2 > 0 ? 1 - $2 : NaN)");
      gp << "unset multiplot\n"
         << "unset logscale\n"
         << "set autoscale\n";
    }
  }
  if (!pending.empty()) {
    gp << "$rss << EOD\n";
    for (auto& p : pending)
      gp << gp_quote(p.name) << ' ' << num_or_nan(p.bytes_per_task()) << '\n';
    gp << "EOD\n"
       << "set output 'rss.png'\n"
       << "set terminal pngcairo size 700,480 font ',10'\n"
       << "set title " << gp_quote(title + ", memory per pending task") << "\n"
       << "unset xlabel\n"
       << "set ylabel 'bytes of server RSS per pending task'\n"
       << "set yrange [0:*]\n"
       << "set style data histograms\n"
       << "set style fill solid 0.85 border -1\n"
       << "set boxwidth 0.6\n"
       << "unset key\n"
       << "plot $rss using 2:xtic(1)\n";
  }
}

} // namespace dally::bench::peers
