// dallyctl: Dally's command-line client. Connects to a dallyd with
// net::connect_engine and sends one request (or, for `consume`,
// subscribes a local consumer actor and prints what it receives).
//
// Exit codes (also in --help and docs/operations.md):
//   0 ok, 1 the request failed (the engine's error on stderr as
//   "error: <errc>: <message>"), 2 usage error, 3 cannot connect,
//   4 not found.

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <pthread.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/remote_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "apps/cli_util.hpp"
#include "core/delivery_policy.hpp"
#include "core/time_range.hpp"
#include "net/client_guard.hpp"
#include "net/cluster_client.hpp"
#include "net/cluster_types.hpp"
#include "net/engine_actor.hpp"
#include "net/error.hpp"
#include "net/owning_actor.hpp"
#include "net/remote.hpp"
#include "net/tls.hpp"
#include "net/type_ids.hpp"
#include "runtime/setup.hpp"
#include "runtime/watchdog.hpp"

namespace dally::apps {

namespace {

constexpr int exit_ok = 0;
constexpr int exit_failed = 1;
constexpr int exit_usage = 2;
constexpr int exit_connect = 3;
constexpr int exit_not_found = 4;
constexpr int exit_overloaded = 5;

constexpr uint16_t default_port = 7400;

constexpr const char* help_text =
  R"(usage: dallyctl [--host H] [--port P | --seeds H:P,...] [--json]
                [--timeout DUR] COMMAND ...

Talks to a dallyd node (default 127.0.0.1:7400) or, with --seeds, to a
cluster through any of its live nodes.

commands:
  schedule --topic T [WHEN] [--payload TEXT] [--key K] [--lease DUR]
           [--max-attempts N] [--backoff DUR] [--backoff-max DUR]
      Schedules a task and prints its id. Without --payload the payload is
      read from stdin (all bytes, up to EOF). WHEN is one of
        --at TIME            once, at TIME
        --in DUR             once, DUR from now
        --every DUR          fixed rate
        --every-after-done DUR  fixed delay after each completion
        --cron 'EXPR' [--tz ZONE]  cron, 5 or 6 fields, IANA zone (UTC)
        --intervals D1,D2,... [--cyclic]  after D1, then D2 later, ...
      (none: once, at once). Periodic kinds take [--count N] [--start TIME]
      [--end TIME]. A policy option fills the others with Dally's defaults
      (lease 30s, 10 attempts, backoff 1s doubling up to 10m).
  get ID                      prints a task (or dead letter)
  revoke ID                   prints done | in_flight | completed | not_found
  reschedule ID (--at TIME | --in DUR)   prints the outcome, as revoke
  kick ID [--at TIME | --in DUR]   revives a dead letter (due now by default)
  stats                       the node's counters
  cluster status              a cluster node's view: each node with its
      address, whether it is reachable, its role (coordinator, standby or
      learner) and how many shards it owns, the coordinator and its
      standbys, the term and the map's epoch. --port
      is the node's cluster port (its address in --cluster-seeds), not
      its engine port.
  dead-letters [--after ID] [--limit N]   one page of dead letters
  consume TOPIC [--max N] [--fail-every N] [--max-in-flight N]
                [--retry-in DUR] [--delay DUR]
      Subscribes and prints every delivery (id, topic, due, delivered time,
      lateness, attempt, payload), acking each one. --fail-every N nacks
      every Nth delivery (retried after --retry-in, else the task's
      backoff); --delay DUR holds each delivery that long before answering;
      --max N stops after N deliveries (nacked ones count), otherwise it
      runs until SIGINT or SIGTERM. Either way it unsubscribes and exits 0
      (1 if the connection to the node is lost).

TIME: UTC ms since the epoch, or ISO 8601 with a zone: 2026-11-22T10:00:00Z,
  2026-11-22T10:00:00.250Z, 2026-11-22T11:00:00+01:00.
DUR: plain ms (1500) or number-unit pairs: 500ms, 5s, 2m, 1h, 1d, 1h30m.
  (--in of reschedule and kick counts from this machine's clock; schedule
  --in from the node's.)

global options (anywhere on the line; --name value or --name=value):
  --host H        node address (default 127.0.0.1)
  --port P        node port (default 7400)
  --seeds H:P,H:P,...
                  instead of --host and --port: engine addresses of nodes
                  of a cluster. dallyctl connects to those it can reach
                  and sends each request to the node owning its task,
                  through another node when that one is not reachable,
                  and retries a request a node refused as not its own
                  (see docs/cluster.md, "Clients in a cluster"). stats
                  are those of one node; cluster status takes --host and
                  --port.
  --json          JSON output: one object per line. Strings are exact for
                  UTF-8 text; other bytes are written as \u00XX and the
                  exact bytes added as base64 in "payload_base64".
  --timeout DUR   connecting and each request (default 10s)
  --max-message-bytes N
                  the node's limit on one message (its --max-message-bytes,
                  default 67108864); a larger request fails with
                  request_too_large and is not sent
  --tls-cert F, --tls-key F, --tls-ca F
                  TLS (all three, PEM): this client's certificate and key,
                  and the authority that signed the node's certificate
  -h, --help      this text

exit codes:
  0  ok
  1  the request failed; the engine's error is on stderr as
     "error: <errc>: <message>" (e.g. invalid_topic, payload_too_large)
  2  usage error
  3  cannot connect to the node
  4  not found: unknown id (get, kick; revoke/reschedule outcome not_found)
  5  overloaded: the node holds as much unanswered work as it takes;
     nothing was done, retry later
)";

/// A bad command line; run() prints it and exits 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Options every command takes.
struct global_options {
  std::string host = "127.0.0.1";
  uint16_t port = default_port;
  /// --seeds: nodes of a cluster, used instead of host and port.
  std::vector<net::seed_address> seeds;
  bool json = false;
  int64_t timeout_ms = 10'000;
  uint64_t max_message_bytes = net::connect_options{}.max_message_bytes;
  net::tls_files tls;
};

/// What one command accepts besides the global options.
struct command_spec {
  std::string_view name;
  std::set<std::string_view> valued;
  std::set<std::string_view> flags;
  size_t min_args = 0;
  size_t max_args = 0;
};

const std::vector<command_spec>& command_specs() {
  static const std::vector<command_spec> specs{
    {"schedule",
     {"topic", "at", "in", "every", "every-after-done", "cron", "tz",
      "intervals", "payload", "key", "count", "start", "end", "lease",
      "max-attempts", "backoff", "backoff-max"},
     {"cyclic"},
     0,
     0},
    {"get", {}, {}, 1, 1},
    {"revoke", {}, {}, 1, 1},
    {"reschedule", {"at", "in"}, {}, 1, 1},
    {"kick", {"at", "in"}, {}, 1, 1},
    {"stats", {}, {}, 0, 0},
    {"cluster", {}, {}, 1, 1},
    {"dead-letters", {"after", "limit"}, {}, 0, 0},
    {"consume",
     {"max", "fail-every", "max-in-flight", "retry-in", "delay"},
     {},
     1,
     1},
  };
  return specs;
}

/// One parsed command line.
struct command_line {
  global_options global;
  const command_spec* spec = nullptr;
  std::vector<std::string> args;
  std::map<std::string, std::string, std::less<>> values;
  std::set<std::string, std::less<>> flags;
  bool help = false;

  std::optional<std::string> value(std::string_view name) const {
    if (auto i = values.find(name); i != values.end())
      return i->second;
    return std::nullopt;
  }

  bool has(std::string_view name) const {
    return values.count(name) > 0 || flags.count(name) > 0;
  }
};

int64_t duration_arg(std::string_view flag, const std::string& text) {
  auto ms = parse_duration_ms(text);
  if (!ms)
    throw usage_error{"--" + std::string{flag} + ": '" + text +
                      "' is no duration (e.g. 1500, 500ms, 5s, 2m, 1h, 1d)"};
  return *ms;
}

int64_t time_arg(std::string_view flag, const std::string& text) {
  auto ms = parse_time_ms(text);
  if (!ms)
    throw usage_error{"--" + std::string{flag} + ": '" + text +
                      "' is no time (UTC ms, or ISO 8601 such as "
                      "2026-11-22T10:00:00Z)"};
  return *ms;
}

uint64_t uint_arg(std::string_view what, const std::string& text,
                  uint64_t max = UINT64_MAX) {
  auto n = parse_uint(text, max);
  if (!n)
    throw usage_error{std::string{what} + ": '" + text +
                      "' is no number in [0, " + std::to_string(max) + "]"};
  return *n;
}

/// The TLS files of --tls-cert, --tls-key and --tls-ca: none, or all three
/// and loadable. Throws usage_error.
net::tls_files tls_files_of(const command_line& cl) {
  net::tls_files tls{cl.value("tls-cert").value_or(""),
                     cl.value("tls-key").value_or(""),
                     cl.value("tls-ca").value_or("")};
  if (!tls.cert.empty() || !tls.key.empty() || !tls.ca.empty())
    if (auto why = net::check_tls_files(tls))
      throw usage_error{*why};
  return tls;
}

/// Global options that take a value (the others are flags).
const std::set<std::string_view>& global_valued() {
  static const std::set<std::string_view> names{
    "host",     "port",    "timeout", "max-message-bytes",
    "tls-cert", "tls-key", "tls-ca",  "seeds"};
  return names;
}

/// Where the command is: the first word that is neither an option nor a
/// global option's value. nullopt when -h or --help comes first.
std::optional<size_t> command_position(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    if (a == "-h" || a == "--help")
      return std::nullopt;
    if (a.rfind("--", 0) == 0) {
      if (a.find('=') == std::string::npos &&
          global_valued().count(std::string_view{a}.substr(2)) > 0)
        ++i;
      continue;
    }
    return i;
  }
  throw usage_error{"no command given"};
}

const command_spec& spec_of(const std::string& command) {
  for (const auto& spec : command_specs())
    if (spec.name == command)
      return spec;
  throw usage_error{"unknown command '" + command + "'"};
}

/// Reads the option at args[i] (--name, --name=value or --name value,
/// which moves i past the value). Sets out.help for --help.
void read_option(const std::vector<std::string>& args, size_t& i,
                 const command_spec& spec, command_line& out) {
  const auto& a = args[i];
  auto eq = a.find('=');
  auto name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
  if (name == "help") {
    out.help = true;
    return;
  }
  bool valued = global_valued().count(name) > 0 || spec.valued.count(name) > 0;
  bool flag = name == "json" || spec.flags.count(name) > 0;
  if (!valued && !flag)
    throw usage_error{"unknown option --" + name + " for " +
                      std::string{spec.name}};
  if (flag) {
    if (eq != std::string::npos)
      throw usage_error{"--" + name + " takes no value"};
    out.flags.insert(name);
    return;
  }
  std::string value;
  if (eq != std::string::npos) {
    value = a.substr(eq + 1);
  } else {
    if (i + 1 >= args.size())
      throw usage_error{"--" + name + " needs a value"};
    value = args[++i];
  }
  out.values[name] = value;
}

/// Sorts every word but the command into options and arguments (all words
/// after "--" are arguments). Stops at the first help option.
void read_words(const std::vector<std::string>& args, size_t cmd_pos,
                const command_spec& spec, command_line& out) {
  bool only_args = false;
  for (size_t i = 0; i < args.size() && !out.help; ++i) {
    if (i == cmd_pos)
      continue;
    const auto& a = args[i];
    if (a == "-h" && !only_args) {
      out.help = true;
    } else if (a == "--" && !only_args) {
      only_args = true;
    } else if (only_args || a.rfind("--", 0) != 0 || a == "--") {
      out.args.push_back(a);
    } else {
      read_option(args, i, spec, out);
    }
  }
}

void check_arg_count(const command_spec& spec, const command_line& cl) {
  if (cl.args.size() >= spec.min_args && cl.args.size() <= spec.max_args)
    return;
  throw usage_error{std::string{spec.name} + " takes " +
                    (spec.min_args == spec.max_args
                       ? std::to_string(spec.min_args)
                       : std::to_string(spec.min_args) + " to " +
                           std::to_string(spec.max_args)) +
                    " argument(s), got " + std::to_string(cl.args.size())};
}

/// Checks the global options' values and moves them into cl.global.
void read_global_options(command_line& cl) {
  if (auto host = cl.value("host")) {
    if (host->empty())
      throw usage_error{"--host must not be empty"};
    cl.global.host = *host;
  }
  if (auto port = cl.value("port")) {
    auto p = uint_arg("--port", *port, 65535);
    if (p == 0)
      throw usage_error{"--port must be in [1, 65535]"};
    cl.global.port = static_cast<uint16_t>(p);
  }
  if (auto seeds = cl.value("seeds")) {
    if (cl.value("host") || cl.value("port"))
      throw usage_error{"--seeds replaces --host and --port; give one or the "
                        "other"};
    auto parsed = net::parse_seeds(*seeds);
    if (!parsed)
      throw usage_error{"--seeds: " + net::from_caf(parsed.error()).message()};
    cl.global.seeds = std::move(*parsed);
  }
  if (auto t = cl.value("timeout")) {
    cl.global.timeout_ms = duration_arg("timeout", *t);
    if (cl.global.timeout_ms < 1)
      throw usage_error{"--timeout must be at least 1 ms"};
  }
  if (auto m = cl.value("max-message-bytes")) {
    cl.global.max_message_bytes =
      uint_arg("--max-message-bytes", *m, UINT32_MAX);
    if (cl.global.max_message_bytes <= net::client_framing_bytes)
      throw usage_error{"--max-message-bytes must be above " +
                        std::to_string(net::client_framing_bytes)};
  }
  cl.global.tls = tls_files_of(cl);
  cl.global.json = cl.flags.count("json") > 0;
}

/// Splits argv into global options, the command, its options and
/// arguments. Throws usage_error.
command_line parse_command_line(int argc, char** argv) {
  std::vector<std::string> args{argv + 1, argv + argc};
  command_line out;
  auto cmd_pos = command_position(args);
  if (!cmd_pos || args[*cmd_pos] == "help") {
    out.help = true;
    return out;
  }
  out.spec = &spec_of(args[*cmd_pos]);
  read_words(args, *cmd_pos, *out.spec, out);
  if (out.help)
    return out;
  check_arg_count(*out.spec, out);
  read_global_options(out);
  return out;
}

// -- output -------------------------------------------------------------------

void print_line(const std::string& text) {
  std::string line = text + '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

/// Prints a failed request as "error: <errc>: <message>"; returns the exit
/// code (4 for not_found, 5 for overloaded: retry later, else 1).
int report(const caf::error& err) {
  auto e = net::from_caf(err);
  std::cerr << "error: " << core::to_string(e.code()) << ": " << e.message()
            << std::endl;
  if (e.code() == core::errc::overloaded)
    return exit_overloaded;
  return e.code() == core::errc::not_found ? exit_not_found : exit_failed;
}

std::string time_text(int64_t ms) {
  return core::format_time(ms);
}

const char* outcome_name(v1::ChangeOutcome outcome) {
  switch (outcome) {
    case v1::CHANGE_OUTCOME_DONE:
      return "done";
    case v1::CHANGE_OUTCOME_IN_FLIGHT:
      return "in_flight";
    case v1::CHANGE_OUTCOME_COMPLETED:
      return "completed";
    case v1::CHANGE_OUTCOME_NOT_FOUND:
      return "not_found";
    default:
      return "unspecified";
  }
}

const char* state_name(v1::TaskState state) {
  switch (state) {
    case v1::TASK_STATE_PENDING:
      return "pending";
    case v1::TASK_STATE_IN_FLIGHT:
      return "in_flight";
    default:
      return "unspecified";
  }
}

const char* kind_name(v1::Recurrence::Kind kind) {
  switch (kind) {
    case v1::Recurrence::KIND_AT:
      return "at";
    case v1::Recurrence::KIND_AFTER:
      return "after";
    case v1::Recurrence::KIND_FIXED_RATE:
      return "every";
    case v1::Recurrence::KIND_FIXED_DELAY:
      return "every_after_done";
    case v1::Recurrence::KIND_INTERVALS:
      return "intervals";
    case v1::Recurrence::KIND_CRON:
      return "cron";
    default:
      return "unknown";
  }
}

std::string intervals_text(const v1::Recurrence& r) {
  std::string out;
  for (auto d : r.intervals_ms()) {
    if (!out.empty())
      out += ',';
    out += std::to_string(d);
  }
  return out;
}

std::string recurrence_json(const v1::Recurrence& r) {
  json_object obj;
  obj.add("kind", kind_name(r.kind()));
  switch (r.kind()) {
    case v1::Recurrence::KIND_AT:
      obj.add("at_ms", r.at_ms());
      break;
    case v1::Recurrence::KIND_AFTER:
      obj.add("at_ms", r.at_ms()).add("delay_ms", r.delay_ms());
      break;
    case v1::Recurrence::KIND_FIXED_RATE:
    case v1::Recurrence::KIND_FIXED_DELAY:
      obj.add("period_ms", r.period_ms());
      break;
    case v1::Recurrence::KIND_INTERVALS:
      obj.add_raw("intervals_ms", "[" + intervals_text(r) + "]")
        .add("cyclic", r.cyclic());
      break;
    case v1::Recurrence::KIND_CRON:
      obj.add("cron", r.cron()).add("zone", r.zone());
      break;
    default:
      break;
  }
  if (r.kind() != v1::Recurrence::KIND_AT &&
      r.kind() != v1::Recurrence::KIND_AFTER) {
    obj.add("start_ms", r.start_ms());
    if (r.has_end_ms())
      obj.add("end_ms", r.end_ms());
    if (r.has_max_count())
      obj.add("max_count", r.max_count());
  }
  return obj.str();
}

std::string recurrence_text(const v1::Recurrence& r) {
  std::string out;
  switch (r.kind()) {
    case v1::Recurrence::KIND_AT:
      return "at " + time_text(r.at_ms());
    case v1::Recurrence::KIND_AFTER:
      return "after " + core::format_duration(r.delay_ms());
    case v1::Recurrence::KIND_FIXED_RATE:
      out = "every " + core::format_duration(r.period_ms());
      break;
    case v1::Recurrence::KIND_FIXED_DELAY:
      out = "every " + core::format_duration(r.period_ms()) +
            " after each completion";
      break;
    case v1::Recurrence::KIND_INTERVALS:
      out = "intervals " + intervals_text(r) + (r.cyclic() ? " cyclic" : "");
      break;
    case v1::Recurrence::KIND_CRON:
      out = "cron '" + printable(r.cron()) + "' in " +
            (r.zone().empty() ? std::string{"UTC"} : r.zone());
      break;
    default:
      return "unknown";
  }
  out += " from " + time_text(r.start_ms());
  if (r.has_end_ms())
    out += " until " + time_text(r.end_ms());
  if (r.has_max_count())
    out += ", " + std::to_string(r.max_count()) + " times";
  return out;
}

std::string policy_json(const v1::DeliveryPolicy& p) {
  return json_object{}
    .add("lease_ms", p.lease_ms())
    .add("max_attempts", p.max_attempts())
    .add("backoff_initial_ms", p.backoff_initial_ms())
    .add("backoff_multiplier_permille", p.backoff_multiplier_permille())
    .add("backoff_max_ms", p.backoff_max_ms())
    .str();
}

void add_task_fields(json_object& obj, const v1::TaskRecord& t) {
  obj.add("id", t.id()).add("topic", t.topic());
  add_payload(obj, t.payload());
  obj.add("due_ms", t.due_ms())
    .add("due", time_text(t.due_ms()))
    .add("state", state_name(t.state()))
    .add("attempt", t.attempt())
    .add("fired_count", t.fired_count())
    .add("lease_deadline_ms", t.lease_deadline_ms())
    .add("retry_at_ms", t.retry_at_ms())
    .add_raw("recurrence", recurrence_json(t.recurrence()))
    .add_raw("policy", policy_json(t.policy()));
  if (t.has_idempotency_key())
    obj.add("idempotency_key", t.idempotency_key());
}

void print_task(const global_options& g, const v1::GetReply& reply) {
  const auto& t = reply.task();
  if (g.json) {
    json_object obj;
    add_task_fields(obj, t);
    obj.add("dead", reply.dead());
    if (reply.dead())
      obj.add("dead_reason", reply.dead_reason());
    print_line(obj.str());
    return;
  }
  const auto& p = t.policy();
  std::string out =
    "id: " + std::to_string(t.id()) + "\ntopic: " + printable(t.topic()) +
    "\nstate: " +
    (reply.dead() ? std::string{"dead"} : std::string{state_name(t.state())}) +
    "\ndue: " + time_text(t.due_ms()) + " (" + std::to_string(t.due_ms()) +
    ")\nattempt: " + std::to_string(t.attempt()) +
    "\nrecurrence: " + recurrence_text(t.recurrence()) +
    "\nfired: " + std::to_string(t.fired_count());
  if (t.state() == v1::TASK_STATE_IN_FLIGHT)
    out += "\nlease_deadline: " + time_text(t.lease_deadline_ms());
  if (t.retry_at_ms() != 0)
    out += "\nretry_at: " + time_text(t.retry_at_ms());
  out += "\npolicy: lease " + std::to_string(p.lease_ms()) + " ms, " +
         std::to_string(p.max_attempts()) + " attempts, backoff " +
         std::to_string(p.backoff_initial_ms()) + " ms x" +
         std::to_string(p.backoff_multiplier_permille()) + "/1000 up to " +
         std::to_string(p.backoff_max_ms()) + " ms";
  if (t.has_idempotency_key())
    out += "\nkey: " + printable(t.idempotency_key());
  if (reply.dead())
    out += "\ndead_reason: " + printable(reply.dead_reason());
  out += "\npayload: " + printable(t.payload());
  print_line(out);
}

// -- requests -----------------------------------------------------------------

/// A connected client: the actor system and the node's engine.
class client {
public:
  client(caf::actor_system& sys, engine_actor engine, global_options g)
    : sys_(sys), engine_(std::move(engine)), global_(std::move(g)) {
    // nop
  }

  caf::actor_system& system() { return sys_; }
  const engine_actor& engine() const { return engine_; }
  const global_options& global() const { return global_; }

  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds{global_.timeout_ms};
  }

  /// Sends `req` and waits for its reply; the reply or the error.
  template<class Reply, class... Request>
  std::pair<std::optional<Reply>, caf::error> ask(Request&&... req) {
    caf::scoped_actor self{sys_};
    std::optional<Reply> reply;
    caf::error failure;
    self->request(engine_, timeout(), std::forward<Request>(req)...)
      .receive([&](Reply& r) { reply = std::move(r); },
               [&](caf::error& err) { failure = std::move(err); });
    return {std::move(reply), std::move(failure)};
  }

private:
  caf::actor_system& sys_;
  engine_actor engine_;
  global_options global_;
};

uint64_t id_arg(const command_line& cl) {
  return uint_arg("ID", cl.args.at(0));
}

/// Reads all of stdin (binary).
std::string read_stdin() {
  if (::isatty(STDIN_FILENO))
    std::cerr << "dallyctl: reading the payload from stdin (end it with "
                 "Ctrl-D, or pass --payload)"
              << std::endl;
  std::string out;
  char buf[65536];
  for (;;) {
    auto n = ::read(STDIN_FILENO, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

/// Which of the options that say when a task runs was given ("" for
/// none). Throws usage_error if more than one was.
std::string when_kind(const command_line& cl) {
  static const std::vector<std::string_view> kinds{
    "at", "in", "every", "every-after-done", "cron", "intervals"};
  std::string kind;
  for (auto k : kinds) {
    if (!cl.has(k))
      continue;
    if (!kind.empty())
      throw usage_error{"--" + kind + " and --" + std::string{k} +
                        " exclude each other"};
    kind = k;
  }
  return kind;
}

/// "D1,D2,..." into the list of intervals.
void read_intervals(const std::string& list,
                    v1::RecurrenceSpec::Intervals& iv) {
  size_t pos = 0;
  for (;;) {
    auto comma = list.find(',', pos);
    iv.add_intervals_ms(
      duration_arg("intervals", list.substr(pos, comma == std::string::npos
                                                   ? std::string::npos
                                                   : comma - pos)));
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
}

/// Fills `when` from the option of `kind` and checks the options that only
/// go with some kinds.
void read_when(const command_line& cl, const std::string& kind,
               v1::RecurrenceSpec& when) {
  if (kind == "at") {
    when.set_at_ms(time_arg("at", *cl.value("at")));
  } else if (kind == "in") {
    when.set_in_ms(duration_arg("in", *cl.value("in")));
  } else if (kind == "every") {
    when.set_every_ms(duration_arg("every", *cl.value("every")));
  } else if (kind == "every-after-done") {
    when.set_every_after_done_ms(
      duration_arg("every-after-done", *cl.value("every-after-done")));
  } else if (kind == "cron") {
    when.mutable_cron()->set_expression(*cl.value("cron"));
    if (auto tz = cl.value("tz"))
      when.mutable_cron()->set_zone(*tz);
  } else if (kind == "intervals") {
    read_intervals(*cl.value("intervals"), *when.mutable_intervals());
    when.mutable_intervals()->set_cyclic(cl.has("cyclic"));
  }
  if (cl.has("tz") && kind != "cron")
    throw usage_error{"--tz goes with --cron"};
  if (cl.has("cyclic") && kind != "intervals")
    throw usage_error{"--cyclic goes with --intervals"};
  bool periodic = kind == "every" || kind == "every-after-done" ||
                  kind == "cron" || kind == "intervals";
  for (auto bound : {"count", "start", "end"})
    if (cl.has(bound) && !periodic)
      throw usage_error{std::string{"--"} + bound +
                        " goes with --every, --every-after-done, --cron "
                        "or --intervals"};
  if (auto n = cl.value("count"))
    when.set_max_count(uint_arg("--count", *n));
  if (auto t = cl.value("start"))
    when.set_start_ms(time_arg("start", *t));
  if (auto t = cl.value("end"))
    when.set_end_ms(time_arg("end", *t));
}

/// The delivery policy, if any policy option was given: Dally's defaults
/// with the given options over them.
void read_policy(const command_line& cl, v1::ScheduleRequest& req) {
  if (!cl.has("lease") && !cl.has("max-attempts") && !cl.has("backoff") &&
      !cl.has("backoff-max"))
    return;
  core::delivery_policy defaults;
  auto* p = req.mutable_policy();
  p->set_lease_ms(defaults.lease_ms);
  p->set_max_attempts(defaults.max_attempts);
  p->set_backoff_initial_ms(defaults.backoff_initial_ms);
  p->set_backoff_multiplier_permille(defaults.backoff_multiplier_permille);
  p->set_backoff_max_ms(defaults.backoff_max_ms);
  if (auto v = cl.value("lease"))
    p->set_lease_ms(duration_arg("lease", *v));
  if (auto v = cl.value("max-attempts"))
    p->set_max_attempts(
      static_cast<uint32_t>(uint_arg("--max-attempts", *v, UINT32_MAX)));
  if (auto v = cl.value("backoff"))
    p->set_backoff_initial_ms(duration_arg("backoff", *v));
  if (auto v = cl.value("backoff-max"))
    p->set_backoff_max_ms(duration_arg("backoff-max", *v));
}

/// Builds the schedule request from the command line. Throws usage_error.
v1::ScheduleRequest schedule_request_of(const command_line& cl) {
  v1::ScheduleRequest req;
  auto topic = cl.value("topic");
  if (!topic)
    throw usage_error{"schedule needs --topic T"};
  req.set_topic(*topic);
  read_when(cl, when_kind(cl), *req.mutable_when());
  read_policy(cl, req);
  if (auto key = cl.value("key"))
    req.set_idempotency_key(*key);
  if (auto payload = cl.value("payload"))
    req.set_payload(*payload);
  else
    req.set_payload(read_stdin());
  return req;
}

int cmd_schedule(client& c, const command_line& cl) {
  auto req = schedule_request_of(cl);
  auto [reply, err] =
    c.ask<net::schedule_reply>(net::make_wire(std::move(req)));
  if (!reply)
    return report(err);
  const auto& r = reply->pb;
  if (c.global().json)
    print_line(json_object{}
                 .add("id", r.id())
                 .add("due_ms", r.due_ms())
                 .add("due", time_text(r.due_ms()))
                 .add("created", r.created())
                 .str());
  else
    print_line(std::to_string(r.id()));
  return exit_ok;
}

/// Prints a change outcome; not_found exits 4.
int print_outcome(client& c, uint64_t id, v1::ChangeOutcome outcome) {
  if (c.global().json)
    print_line(
      json_object{}.add("id", id).add("outcome", outcome_name(outcome)).str());
  else
    print_line(outcome_name(outcome));
  return outcome == v1::CHANGE_OUTCOME_NOT_FOUND ? exit_not_found : exit_ok;
}

/// The instant of --at or --in (now + DUR), if either is given.
std::optional<int64_t> when_arg(const command_line& cl, bool required) {
  if (cl.has("at") && cl.has("in"))
    throw usage_error{"--at and --in exclude each other"};
  if (auto t = cl.value("at"))
    return time_arg("at", *t);
  if (auto d = cl.value("in")) {
    auto due = core::checked_add(wall_now_ms(), duration_arg("in", *d));
    if (!due)
      throw usage_error{"--in is too large"};
    return *due;
  }
  if (required)
    throw usage_error{std::string{cl.spec->name} +
                      " needs --at TIME or --in DUR"};
  return std::nullopt;
}

int cmd_revoke(client& c, const command_line& cl) {
  v1::RevokeRequest req;
  req.set_id(id_arg(cl));
  auto [reply, err] = c.ask<net::change_reply>(net::make_wire(req));
  if (!reply)
    return report(err);
  return print_outcome(c, req.id(), reply->pb.outcome());
}

int cmd_reschedule(client& c, const command_line& cl) {
  v1::RescheduleRequest req;
  req.set_id(id_arg(cl));
  req.set_due_ms(*when_arg(cl, true));
  auto [reply, err] = c.ask<net::change_reply>(net::make_wire(req));
  if (!reply)
    return report(err);
  return print_outcome(c, req.id(), reply->pb.outcome());
}

int cmd_kick(client& c, const command_line& cl) {
  v1::KickRequest req;
  req.set_id(id_arg(cl));
  if (auto due = when_arg(cl, false))
    req.set_due_ms(*due);
  auto [reply, err] = c.ask<net::change_reply>(net::make_wire(req));
  if (!reply)
    return report(err);
  return print_outcome(c, req.id(), reply->pb.outcome());
}

int cmd_get(client& c, const command_line& cl) {
  v1::GetRequest req;
  req.set_id(id_arg(cl));
  auto [reply, err] = c.ask<net::get_reply>(net::make_wire(req));
  if (!reply)
    return report(err);
  print_task(c.global(), reply->pb);
  return exit_ok;
}

int cmd_stats(client& c, const command_line&) {
  auto [reply, err] = c.ask<net::stats_reply>(net::stats_request{});
  if (!reply)
    return report(err);
  const auto& s = reply->pb;
  std::vector<std::pair<const char*, uint64_t>> fields{
    {"shards", s.shards()},
    {"in_window", s.in_window()},
    {"in_flight", s.in_flight()},
    {"waiting", s.waiting()},
    {"scheduled", s.scheduled()},
    {"fired", s.fired()},
    {"acked", s.acked()},
    {"nacked", s.nacked()},
    {"redelivered", s.redelivered()},
    {"dead_lettered", s.dead_lettered()},
    {"revoked", s.revoked()},
    {"commits", s.commits()},
    {"shard_restarts", s.shard_restarts()},
    {"memtable_bytes", s.memtable_bytes()},
    {"quarantined", s.quarantined()},
    {"pending_schedules", s.pending_schedules()},
    {"peak_pending_per_shard", s.peak_pending_per_shard()},
    {"overloaded", s.overloaded()},
    {"front_door_backlog", s.front_door_backlog()},
    {"front_door_peak_backlog", s.front_door_peak_backlog()},
    {"front_door_closings", s.front_door_closings()},
    {"front_door_stalls", s.front_door_stalls()},
  };
  if (c.global().json) {
    json_object obj;
    for (auto& [name, value] : fields)
      obj.add(name, value);
    std::string topics = "[";
    for (const auto& t : s.topics()) {
      if (topics.size() > 1)
        topics += ',';
      topics += json_object{}
                  .add("topic", t.topic())
                  .add("consumers", t.consumers())
                  .add("waiting", t.waiting())
                  .add("in_flight", t.in_flight())
                  .add("queued", t.queued())
                  .add("delivered", t.delivered())
                  .str();
    }
    obj.add_raw("topics", topics + "]");
    print_line(obj.str());
    return exit_ok;
  }
  std::string out;
  for (auto& [name, value] : fields)
    out += std::string{name} + ": " + std::to_string(value) + "\n";
  for (const auto& t : s.topics())
    out += "topic " + printable(t.topic()) +
           ": consumers=" + std::to_string(t.consumers()) +
           " waiting=" + std::to_string(t.waiting()) +
           " in_flight=" + std::to_string(t.in_flight()) +
           " queued=" + std::to_string(t.queued()) +
           " delivered=" + std::to_string(t.delivered()) + "\n";
  out.pop_back();
  print_line(out);
  return exit_ok;
}

int cmd_dead_letters(client& c, const command_line& cl) {
  v1::DeadLettersRequest req;
  if (auto v = cl.value("after"))
    req.set_after_id(uint_arg("--after", *v));
  if (auto v = cl.value("limit"))
    req.set_limit(static_cast<uint32_t>(uint_arg("--limit", *v, UINT32_MAX)));
  auto [reply, err] = c.ask<net::dead_letters_reply>(net::make_wire(req));
  if (!reply)
    return report(err);
  const auto& page = reply->pb;
  if (c.global().json) {
    std::string dead = "[";
    for (const auto& d : page.dead()) {
      if (dead.size() > 1)
        dead += ',';
      json_object obj;
      add_task_fields(obj, d.task());
      obj.add("dead_ms", d.dead_ms()).add("reason", d.reason());
      dead += obj.str();
    }
    print_line(json_object{}
                 .add_raw("dead", dead + "]")
                 .add("next_after_id", page.next_after_id())
                 .str());
    return exit_ok;
  }
  for (const auto& d : page.dead())
    print_line(
      std::to_string(d.task().id()) + " topic=" + printable(d.task().topic()) +
      " attempts=" + std::to_string(d.task().attempt()) +
      " dead=" + time_text(d.dead_ms()) + " reason=" + printable(d.reason()) +
      " payload=" + printable(d.task().payload()));
  if (page.next_after_id() != 0)
    print_line("more: dallyctl dead-letters --after " +
               std::to_string(page.next_after_id()));
  return exit_ok;
}

// -- consume ------------------------------------------------------------------

using release_atom = caf::atom_constant<caf::atom("release")>;

/// The local consumer: dally::consumer_actor plus a timer message for
/// --delay.
using local_consumer =
  consumer_actor::extend<caf::reacts_to<release_atom, uint64_t>>;

struct consume_options {
  std::string topic;
  uint64_t max = 0;
  uint64_t fail_every = 0;
  uint32_t max_in_flight = 0;
  std::optional<int64_t> retry_in_ms;
  int64_t delay_ms = 0;
  bool json = false;
};

/// What the consumer tells the main thread.
struct consume_signals {
  /// Set once the --max-th delivery was answered.
  std::atomic<bool> done{false};
  /// Set when the connection to the node is gone.
  std::atomic<bool> lost{false};
};

struct consumer_state {
  static inline const char* name = "dallyctl.consumer";

  consume_options opts;
  std::shared_ptr<consume_signals> signals;
  uint64_t received = 0;
  /// Set once the --max-th delivery came in: later ones are refused, so
  /// the node hands them to another consumer at once.
  bool full = false;
  struct held {
    caf::typed_response_promise<net::delivery_reply> rp;
    net::delivery_reply reply;
    bool last = false;
  };
  std::map<uint64_t, held> holding;
  uint64_t next_hold = 0;
};

std::string delivery_line(const consume_options& opts, const v1::Delivery& d,
                          int64_t now_ms, bool nack) {
  auto lateness = now_ms - d.due_ms();
  if (opts.json) {
    json_object obj;
    obj.add("id", d.id().task_id())
      .add("occurrence", d.id().occurrence())
      .add("topic", d.topic())
      .add("due_ms", d.due_ms())
      .add("fire_ms", d.fire_ms())
      .add("delivered_ms", now_ms)
      .add("lateness_ms", lateness)
      .add("attempt", d.attempt())
      .add("lease_deadline_ms", d.lease_deadline_ms())
      .add("verdict", nack ? "nack" : "ack");
    add_payload(obj, d.payload());
    return obj.str();
  }
  return "id=" + std::to_string(d.id().task_id()) +
         " topic=" + printable(d.topic()) + " due=" + time_text(d.due_ms()) +
         " delivered=" + time_text(now_ms) +
         " late=" + std::to_string(lateness) +
         "ms attempt=" + std::to_string(d.attempt()) + (nack ? " nack" : "") +
         " payload=" + printable(d.payload());
}

local_consumer::behavior_type
consumer_fun(net::owning_actor<consumer_state, local_consumer::base>* self,
             consume_options opts, std::shared_ptr<consume_signals> signals) {
  self->state.opts = std::move(opts);
  self->state.signals = std::move(signals);
  return {
    [self](net::delivery_msg& msg) -> caf::result<net::delivery_reply> {
      auto& st = self->state;
      if (st.full)
        return net::make_caf_error(core::errc::unavailable,
                                   "dallyctl consume is stopping");
      auto now = wall_now_ms();
      ++st.received;
      bool nack =
        st.opts.fail_every > 0 && st.received % st.opts.fail_every == 0;
      print_line(delivery_line(st.opts, msg.pb, now, nack));
      net::delivery_reply reply;
      if (nack) {
        reply.pb.set_verdict(v1::DeliveryReply::VERDICT_NACK);
        if (st.opts.retry_in_ms)
          reply.pb.set_retry_in_ms(*st.opts.retry_in_ms);
      } else {
        reply.pb.set_verdict(v1::DeliveryReply::VERDICT_ACK);
      }
      bool last = st.opts.max > 0 && st.received >= st.opts.max;
      if (last)
        st.full = true;
      auto rp = self->make_response_promise<net::delivery_reply>();
      if (st.opts.delay_ms > 0) {
        auto key = st.next_hold++;
        st.holding.emplace(key,
                           consumer_state::held{rp, std::move(reply), last});
        self->delayed_send(self, std::chrono::milliseconds{st.opts.delay_ms},
                           release_atom::value, key);
        return rp;
      }
      // Answered before the main thread hears of the end, so the answer
      // leaves ahead of the unsubscribe.
      rp.deliver(std::move(reply));
      if (last)
        st.signals->done = true;
      return rp;
    },
    [self](release_atom, uint64_t key) {
      auto& st = self->state;
      auto i = st.holding.find(key);
      if (i == st.holding.end())
        return;
      i->second.rp.deliver(std::move(i->second.reply));
      bool last = i->second.last;
      st.holding.erase(i);
      if (last)
        st.signals->done = true;
    },
  };
}

consume_options consume_options_of(const command_line& cl, bool json) {
  consume_options opts;
  opts.topic = cl.args.at(0);
  opts.json = json;
  if (auto v = cl.value("max"))
    opts.max = uint_arg("--max", *v);
  if (auto v = cl.value("fail-every"))
    opts.fail_every = uint_arg("--fail-every", *v);
  if (auto v = cl.value("max-in-flight"))
    opts.max_in_flight =
      static_cast<uint32_t>(uint_arg("--max-in-flight", *v, UINT32_MAX));
  if (auto v = cl.value("retry-in"))
    opts.retry_in_ms = duration_arg("retry-in", *v);
  if (auto v = cl.value("delay"))
    opts.delay_ms = duration_arg("delay", *v);
  return opts;
}

/// Waits until the consumer is done, the node is gone, or SIGINT or
/// SIGTERM arrives; then unsubscribes unless the node is gone. Returns the
/// exit code.
int consume_until_end(client& c, const std::string& topic,
                      const consumer_actor& handle,
                      const consume_signals& signals) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  timespec poll_interval{0, 20'000'000};
  while (!signals.done && !signals.lost) {
    auto sig = sigtimedwait(&stop_signals, nullptr, &poll_interval);
    if (sig == SIGINT || sig == SIGTERM)
      break;
  }
  if (signals.lost && !signals.done) {
    std::cerr << "error: unavailable: the connection to the node was lost"
              << std::endl;
    return exit_failed;
  }
  v1::UnsubscribeRequest unsub;
  unsub.set_topic(topic);
  auto [unsubscribed, uerr] =
    c.ask<net::empty_reply>(net::make_wire(std::move(unsub)), handle);
  // The deliveries are settled either way; a failed unsubscribe only means
  // the node notices the consumer's end when the connection closes.
  if (!unsubscribed && !signals.lost)
    std::cerr << "dallyctl: unsubscribe failed: " << net::describe(uerr)
              << std::endl;
  return exit_ok;
}

/// Shuts down in order: the consumer first, then one round trip to the
/// node, so that its reaction to the consumer's end (BASP messages about
/// the proxy) has arrived before the actor system stops the middleman. A
/// shutdown racing such a message leaks a cycle of CAF 0.17's middleman
/// objects (LeakSanitizer reports it).
void stop_consumer(client& c, const local_consumer& me,
                   const consume_signals& signals) {
  {
    caf::scoped_actor self{c.system()};
    self->monitor(me);
    caf::anon_send_exit(me, caf::exit_reason::user_shutdown);
    self->receive([](const caf::down_msg&) {},
                  caf::after(std::chrono::seconds{5}) >> [] {});
  }
  if (!signals.lost)
    static_cast<void>(c.ask<net::stats_reply>(net::stats_request{}));
}

int cmd_consume(client& c, const command_line& cl) {
  auto opts = consume_options_of(cl, c.global().json);
  // Shared: the node's proxy may report its end during shutdown, after
  // this function returned.
  auto signals = std::make_shared<consume_signals>();
  // Told when the node goes away (connection lost): then the main thread
  // stops waiting.
  c.engine()->attach_functor([signals] { signals->lost = true; });
  local_consumer me = c.system().spawn(consumer_fun, opts, signals);
  consumer_actor handle = me;
  v1::SubscribeRequest sub;
  sub.set_topic(opts.topic);
  sub.set_max_in_flight(opts.max_in_flight);
  auto [subscribed, err] =
    c.ask<net::empty_reply>(net::make_wire(std::move(sub)), handle);
  int rc = subscribed ? consume_until_end(c, opts.topic, handle, *signals)
                      : report(err);
  stop_consumer(c, me, *signals);
  return rc;
}

// -- cluster status -----------------------------------------------------------

/// The cluster actor a node publishes on its cluster address. CAF 0.17.6
/// may drop a new connection with connection_timeout before the handshake
/// (see net::connect_engine); such a connect is tried again until
/// `deadline`. With `tls` the node's cluster port must speak TLS.
caf::expected<caf::actor>
connect_cluster_node(caf::actor_system& sys, const std::string& host,
                     uint16_t port, bool tls,
                     std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    auto node = tls ? caf::openssl::remote_actor(sys, host, port)
                    : sys.middleman().remote_actor(host, port);
    if (node || node.error() != caf::sec::connection_timeout ||
        std::chrono::steady_clock::now() >= deadline)
      return node;
  }
}

void print_cluster_status(const v1::ClusterStatusReply& st, bool json) {
  auto ids = [](const auto& xs) {
    std::string out;
    for (auto x : xs)
      out += (out.empty() ? "" : ",") + std::to_string(x);
    return out;
  };
  if (json) {
    std::string nodes = "[";
    for (const auto& n : st.nodes())
      nodes +=
        (nodes.size() > 1 ? "," : "") + json_object{}
                                          .add("id", n.id())
                                          .add("address", n.address())
                                          .add("reachable", n.reachable())
                                          .add("voter", n.voter())
                                          .add("shards", n.shards())
                                          .str();
    print_line(json_object{}
                 .add("self", st.self())
                 .add("coordinator", st.coordinator())
                 .add_raw("standbys", "[" + ids(st.standbys()) + "]")
                 .add("term", st.term())
                 .add("epoch", st.epoch())
                 .add("shard_count", st.shard_count())
                 .add_raw("nodes", nodes + "]")
                 .add("commit_index", st.commit_index())
                 .add("commit_term", st.commit_term())
                 .str());
    return;
  }
  for (const auto& n : st.nodes())
    print_line("node " + std::to_string(n.id()) + " " + n.address() +
               (n.reachable() ? " reachable" : " unreachable") +
               (n.id() == st.coordinator() ? " coordinator"
                : n.voter()                ? " standby"
                                           : " learner") +
               " shards=" + std::to_string(n.shards()) +
               (n.id() == st.self() ? " (answering)" : ""));
  print_line("coordinator: " + (st.coordinator() == 0
                                  ? std::string{"unknown"}
                                  : std::to_string(st.coordinator())));
  print_line("standbys: " + ids(st.standbys()));
  print_line("term: " + std::to_string(st.term()) +
             " epoch: " + std::to_string(st.epoch()) +
             " shards: " + std::to_string(st.shard_count()));
}

/// `cluster status`: connects to the node's cluster port (no engine) and
/// asks its cluster actor.
int run_cluster_status(caf::actor_system& sys, const global_options& g) {
  auto timeout = std::chrono::milliseconds{g.timeout_ms};
  auto connecting = std::make_shared<std::promise<caf::expected<caf::actor>>>();
  auto result = connecting->get_future();
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::thread{[&sys, connecting, host = g.host, port = g.port,
               tls = !g.tls.cert.empty(), deadline] {
    connecting->set_value(connect_cluster_node(sys, host, port, tls, deadline));
  }}.detach();
  auto where = g.host + ":" + std::to_string(g.port);
  if (result.wait_for(timeout) != std::future_status::ready) {
    std::cerr << "error: cannot connect to " << where << ": timed out after "
              << g.timeout_ms << " ms" << std::endl;
    std::fflush(stdout);
    std::_Exit(exit_connect);
  }
  auto node = result.get();
  if (!node) {
    std::cerr << "error: cannot connect to " << where << ": "
              << net::describe(node.error()) << std::endl;
    return exit_connect;
  }
  caf::scoped_actor self{sys};
  int rc = exit_ok;
  self->request(*node, timeout, net::cluster_status_request{})
    .receive(
      [&](net::cluster_status_reply& reply) {
        print_cluster_status(reply.pb, g.json);
      },
      [&](caf::error& err) { rc = report(err); });
  return rc;
}

// -- main ---------------------------------------------------------------------

/// The node (--host, --port) or, with --seeds, the cluster.
caf::expected<engine_actor> connect(caf::actor_system& sys,
                                    const std::string& host, uint16_t port,
                                    std::vector<net::seed_address> seeds,
                                    net::connect_options copts) {
  if (seeds.empty())
    return net::connect_engine(sys, host, port, copts);
  net::cluster_options opts;
  opts.connect = copts;
  return net::connect_cluster(sys, std::move(seeds), opts);
}

std::string where_of(const global_options& g) {
  if (g.seeds.empty())
    return g.host + ":" + std::to_string(g.port);
  std::string out;
  for (const auto& s : g.seeds)
    out += (out.empty() ? "" : ",") + s.str();
  return "the cluster (" + out + ")";
}

/// Connects to the node or cluster of `g`. remote_actor blocks for as long
/// as the TCP connect and CAF's handshake take (minutes towards a host that
/// drops packets): after the timeout, the process exits with exit_connect.
caf::expected<engine_actor> connect_within_timeout(caf::actor_system& sys,
                                                   const global_options& g) {
  auto connecting =
    std::make_shared<std::promise<caf::expected<engine_actor>>>();
  auto result = connecting->get_future();
  net::connect_options copts;
  copts.max_message_bytes = g.max_message_bytes;
  copts.tls = !g.tls.cert.empty();
  std::thread{[&sys, connecting, host = g.host, port = g.port, seeds = g.seeds,
               copts] {
    connecting->set_value(connect(sys, host, port, seeds, copts));
  }}.detach();
  if (result.wait_for(std::chrono::milliseconds{g.timeout_ms}) !=
      std::future_status::ready) {
    std::cerr << "error: cannot connect to " << where_of(g)
              << ": timed out after " << g.timeout_ms << " ms" << std::endl;
    std::fflush(stdout);
    std::_Exit(exit_connect);
  }
  return result.get();
}

int dispatch(client& c, const command_line& cl) {
  auto name = cl.spec->name;
  if (name == "schedule")
    return cmd_schedule(c, cl);
  if (name == "get")
    return cmd_get(c, cl);
  if (name == "revoke")
    return cmd_revoke(c, cl);
  if (name == "reschedule")
    return cmd_reschedule(c, cl);
  if (name == "kick")
    return cmd_kick(c, cl);
  if (name == "stats")
    return cmd_stats(c, cl);
  if (name == "dead-letters")
    return cmd_dead_letters(c, cl);
  return cmd_consume(c, cl);
}

/// Checks the command's own arguments before connecting, so that a usage
/// error never waits for a node. Throws usage_error.
void validate_offline(const command_line& cl) {
  auto name = cl.spec->name;
  if (name == "schedule") {
    // Everything but the payload (stdin is read only once connected).
    auto copy = cl;
    copy.values["payload"] = "";
    static_cast<void>(schedule_request_of(copy));
  } else if (name == "get" || name == "revoke" || name == "kick" ||
             name == "reschedule") {
    static_cast<void>(id_arg(cl));
    static_cast<void>(when_arg(cl, name == "reschedule"));
  } else if (name == "dead-letters") {
    if (auto v = cl.value("after"))
      uint_arg("--after", *v);
    if (auto v = cl.value("limit"))
      uint_arg("--limit", *v, UINT32_MAX);
  } else if (name == "cluster") {
    if (cl.args.at(0) != "status")
      throw usage_error{"cluster takes 'status', not '" + cl.args.at(0) + "'"};
    if (!cl.global.seeds.empty())
      throw usage_error{"cluster status asks one node's cluster port: give "
                        "--host and --port, not --seeds"};
  } else if (name == "consume") {
    if (cl.args.at(0).empty())
      throw usage_error{"consume needs a topic"};
    for (auto n : {"max", "fail-every", "max-in-flight"})
      if (auto v = cl.value(n))
        uint_arg(std::string{"--"} + n, *v);
    for (auto n : {"retry-in", "delay"})
      if (auto v = cl.value(n))
        duration_arg(n, *v);
  }
}

/// SIGINT and SIGTERM are taken with sigtimedwait by `consume`
/// (`block_stop_signals`); every thread CAF starts inherits the mask. A
/// shell starts background jobs with SIGINT ignored, and an ignored signal
/// never reaches sigwait: take both back.
void set_up_signals(bool block_stop_signals) {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  if (block_stop_signals)
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

/// How long the actor system may take to stop once the command is done.
/// Its teardown waits for every actor and connection without a limit (CAF
/// 0.17) and was seen to hang on loaded machines; what the command had to
/// say is out by then.
constexpr auto teardown_limit = std::chrono::seconds{10};

/// Runs the command `cl` names in `sys`; returns the exit code.
int run_command(caf::actor_system& sys, const command_line& cl) {
  const auto& g = cl.global;
  if (cl.spec->name == "cluster")
    return run_cluster_status(sys, g);
  auto engine = connect_within_timeout(sys, g);
  if (!engine) {
    std::cerr << "error: cannot connect to " << where_of(g) << ": "
              << net::describe(engine.error()) << std::endl;
    return exit_connect;
  }
  client c{sys, *engine, g};
  int rc = exit_usage;
  try {
    rc = dispatch(c, cl);
  } catch (const usage_error& e) {
    std::cerr << "dallyctl: " << e.what() << "\ntry 'dallyctl --help'"
              << std::endl;
  }
  // A cluster client lives until told to stop.
  if (!g.seeds.empty())
    caf::anon_send_exit(*engine, caf::exit_reason::user_shutdown);
  return rc;
}

int run(int argc, char** argv) {
  command_line cl;
  try {
    cl = parse_command_line(argc, argv);
    if (cl.help) {
      std::fputs(help_text, stdout);
      return exit_ok;
    }
    validate_offline(cl);
  } catch (const usage_error& e) {
    std::cerr << "dallyctl: " << e.what() << "\ntry 'dallyctl --help'"
              << std::endl;
    return exit_usage;
  }
  set_up_signals(cl.spec->name == "consume");
  caf::actor_system_config cfg;
  runtime::configure(cfg, runtime::role::client);
  cfg.set("scheduler.max-threads", 2);
  if (!cl.global.tls.cert.empty())
    net::enable_tls(cfg, cl.global.tls);
  runtime::watchdog teardown;
  caf::actor_system sys{cfg};
  auto rc = run_command(sys, cl);
  teardown.arm(teardown_limit, [rc] {
    std::cout.flush();
    std::cerr << "dallyctl: CAF's actor system did not stop within "
              << teardown_limit.count() << " s; exiting without it"
              << std::endl;
    std::fflush(nullptr);
    std::_Exit(rc);
  });
  return rc;
}

} // namespace

} // namespace dally::apps

int main(int argc, char** argv) {
  return dally::apps::run(argc, argv);
}
