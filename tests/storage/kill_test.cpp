#define BOOST_TEST_MODULE storage_kill
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/result.hpp"
#include "storage/rocks_task_store.hpp"
#include "storage/store_options.hpp"
#include "test_support.hpp"

#ifndef DALLY_STORE_WRITER
#error "DALLY_STORE_WRITER must name the dally-store-writer binary"
#endif

using dally::core::task_id;
using dally::storage::due_key;
using dally::storage::rocks_task_store;
using dally::storage::store_options;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

using dally::storage::test::error_of;
using dally::storage::test::prng;

using dally::storage::test::temp_dir;

namespace {

/// Must match what dally-store-writer writes for a task id.
constexpr int64_t t0_ms = 1'700'000'000'000;

/// How one run of the writer ended.
struct run_result {
  /// Ids the writer reported as committed.
  std::vector<task_id> acked;
  /// Whether the writer said it was opening the store.
  bool opening = false;
  /// Whether the kill came after the writer's first acknowledgment.
  bool mid_stream = false;
  /// waitpid status.
  int status = 0;
};

/// Collects complete lines from the writer's pipe as ids.
class ack_reader {
public:
  explicit ack_reader(int fd) : fd_(fd) {
    // nop
  }

  /// Reads what arrives until `deadline` or the end of the stream; returns
  /// false at the end of the stream.
  bool read_until(steady_clock::time_point deadline, run_result& out) {
    for (;;) {
      auto left = std::chrono::duration_cast<milliseconds>(deadline -
                                                           steady_clock::now());
      if (left.count() <= 0)
        return true;
      pollfd pfd{fd_, POLLIN, 0};
      auto rc = ::poll(&pfd, 1, static_cast<int>(left.count()));
      if (rc < 0 && errno == EINTR)
        continue;
      BOOST_REQUIRE(rc >= 0);
      if (rc == 0)
        return true;
      if (!read_some(out))
        return false;
    }
  }

  /// Reads until the writer starts opening the store (or, with
  /// `first_ack`, acknowledges its first commit), `deadline` or the end.
  bool read_first(steady_clock::time_point deadline, bool first_ack,
                  run_result& out) {
    auto reached = [&] { return first_ack ? !out.acked.empty() : out.opening; };
    while (!reached() && steady_clock::now() < deadline)
      if (!read_until(std::min(deadline, steady_clock::now() + milliseconds{5}),
                      out))
        return false;
    return true;
  }

  /// Reads everything left (the writer is dead or dying).
  void drain(run_result& out) {
    while (read_some(out)) {
      // keep reading
    }
  }

private:
  /// One read; false at the end of the stream.
  bool read_some(run_result& out) {
    char buf[4096];
    auto n = ::read(fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      return true;
    if (n <= 0)
      return false;
    partial_.append(buf, static_cast<size_t>(n));
    size_t pos = 0;
    for (auto nl = partial_.find('\n'); nl != std::string::npos;
         nl = partial_.find('\n', pos)) {
      auto line = partial_.substr(pos, nl - pos);
      pos = nl + 1;
      if (line == "opening")
        out.opening = true;
      else
        out.acked.push_back(std::stoull(line));
    }
    partial_.erase(0, pos);
    return true;
  }

  int fd_;
  std::string partial_;
};

/// Starts the writer on `dir`, SIGKILLs it `delay` after it starts opening
/// the store (or after its first acknowledgment), and returns what it
/// acknowledged.
run_result run_and_kill(const std::string& dir, uint64_t seed,
                        milliseconds delay, bool after_first_ack) {
  std::string exe = DALLY_STORE_WRITER;
  auto seed_arg = std::to_string(seed);
  std::vector<char*> argv{exe.data(),
                          const_cast<char*>("--dir"),
                          const_cast<char*>(dir.c_str()),
                          const_cast<char*>("--seed"),
                          seed_arg.data(),
                          nullptr};
  int fds[2];
  BOOST_REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  auto pid = ::fork();
  BOOST_REQUIRE(pid >= 0);
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    ::dup2(fds[1], STDOUT_FILENO);
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  run_result out;
  ack_reader reader{fds[0]};
  // Should the writer end on its own, the caller's status check reports it.
  auto deadline = steady_clock::now() + std::chrono::seconds{20};
  if (reader.read_first(deadline, after_first_ack, out))
    reader.read_until(steady_clock::now() + delay, out);
  out.mid_stream = !out.acked.empty();
  ::kill(pid, SIGKILL);
  // Lines already in the pipe were written after their commit returned:
  // they are acknowledged too.
  reader.drain(out);
  ::close(fds[0]);
  while (::waitpid(pid, &out.status, 0) < 0 && errno == EINTR) {
    // retry
  }
  BOOST_REQUIRE_MESSAGE(out.opening, "the writer never started opening");
  return out;
}

/// Opens the store in process and checks every acknowledged id.
void verify(const std::string& dir, const std::set<task_id>& acked) {
  store_options opts;
  opts.path = dir;
  opts.shard = 0;
  opts.shard_count = 1;
  auto store = rocks_task_store::open(opts);
  BOOST_REQUIRE_MESSAGE(store.has_value(),
                        "reopen failed: " << error_of(store));
  auto& s = **store;
  std::vector<task_id> ids{acked.begin(), acked.end()};
  auto recs = s.get_many(ids);
  BOOST_REQUIRE_MESSAGE(recs.has_value(), "get_many: " << error_of(recs));
  BOOST_CHECK_EQUAL(recs->size(), ids.size());
  std::set<task_id> found;
  for (const auto& rec : *recs) {
    found.insert(rec.task.id);
    auto id = rec.task.id;
    BOOST_CHECK_MESSAGE(rec.task.topic == "kill" &&
                          rec.task.payload ==
                            "dally-kill-" + std::to_string(id) &&
                          rec.task.due_ms == t0_ms + static_cast<int64_t>(id),
                        "task " << id << " damaged");
  }
  for (auto id : acked)
    BOOST_CHECK_MESSAGE(found.contains(id),
                        "acknowledged task " << id << " lost");
  // Every acknowledged task is in the due index; the index may also hold
  // tasks committed just before the kill whose ids were never printed.
  std::set<task_id> indexed;
  due_key after{std::numeric_limits<int64_t>::min(), 0};
  for (;;) {
    auto page = s.scan_due(after, std::numeric_limits<int64_t>::max(), 4096);
    BOOST_REQUIRE_MESSAGE(page.has_value(), "scan_due: " << error_of(page));
    if (page->empty())
      break;
    for (const auto& key : *page) {
      indexed.insert(key.id);
      BOOST_CHECK_EQUAL(key.index_ms, t0_ms + static_cast<int64_t>(key.id));
    }
    after = page->back();
  }
  for (auto id : acked)
    BOOST_CHECK_MESSAGE(indexed.contains(id),
                        "task " << id << " not in the index");
  auto max_id = indexed.empty() ? 0 : *indexed.rbegin();
  if (!acked.empty())
    max_id = std::max(max_id, *acked.rbegin());
  BOOST_CHECK_GT(s.allocate_id(), max_id);
  BOOST_CHECK(s.quarantined().empty());
}

} // namespace

BOOST_AUTO_TEST_CASE(sigkill_loses_no_acknowledged_task) {
  temp_dir dir;
  auto data = (dir.path() / "shard").string();
  prng rng{20240607};
  std::set<task_id> acked;
  int mid_stream = 0;
  auto started = steady_clock::now();
  for (uint64_t round = 1; round <= 20; ++round) {
    BOOST_TEST_CONTEXT("kill " << round) {
      // Odd rounds time the kill from the moment the writer starts opening
      // the store (it may die while recovering it), even ones from its
      // first acknowledgment.
      auto after_first_ack = round % 2 == 0;
      milliseconds delay{rng.between(1, 200)};
      auto run = run_and_kill(data, round, delay, after_first_ack);
      BOOST_REQUIRE_MESSAGE(
        WIFSIGNALED(run.status) && WTERMSIG(run.status) == SIGKILL,
        "the writer ended on its own, status " << run.status);
      for (auto id : run.acked)
        BOOST_REQUIRE_MESSAGE(acked.insert(id).second,
                              "id " << id << " acknowledged twice");
      mid_stream += run.mid_stream ? 1 : 0;
      BOOST_TEST_MESSAGE("kill " << round << " after " << delay.count()
                                 << " ms: " << run.acked.size() << " new acks, "
                                 << acked.size() << " in all");
      verify(data, acked);
    }
  }
  BOOST_CHECK_GE(mid_stream, 10);
  BOOST_TEST_MESSAGE("20 kills in " << std::chrono::duration_cast<milliseconds>(
                                         steady_clock::now() - started)
                                         .count()
                                    << " ms");
}
