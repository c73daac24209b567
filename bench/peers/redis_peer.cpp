// Redis as a delay queue, the usual way: a ZSET `delayed` scored by due
// ms, a Lua script (EVALSHA) run in a loop by a mover thread that moves
// due members to the list `ready`, consumers that LMOVE/BLMOVE from
// `ready` to `processing` and ack with LREM. redis-server runs with AOF:
// appendfsync always (sync) or everysec (periodic).

#include <sys/time.h>

#include <hiredis/hiredis.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "bench/peers/peer.hpp"
#include "bench/peers/process.hpp"

namespace dally::bench::peers {

namespace {

/// Moves up to ARGV[2] members of KEYS[1] scored at most ARGV[1] (now, ms)
/// to the tail of KEYS[2]; returns how many it moved.
constexpr const char* move_script = R"(
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1],
                       'LIMIT', 0, tonumber(ARGV[2]))
if #due == 0 then
  return 0
end
redis.call('ZREM', KEYS[1], unpack(due))
redis.call('RPUSH', KEYS[2], unpack(due))
return #due
)";

/// Seconds a reply may take before the connection counts as broken (a
/// pipeline of fsync'd writes on a slow disk takes a while).
constexpr int reply_timeout_s = 60;

timeval to_timeval(int seconds) {
  timeval tv{};
  tv.tv_sec = seconds;
  return tv;
}

struct reply_deleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};

using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

std::string describe(const redisReply& r) {
  switch (r.type) {
    case REDIS_REPLY_ERROR:
      return "error '" + std::string(r.str, r.len) + "'";
    case REDIS_REPLY_INTEGER:
      return "integer " + std::to_string(r.integer);
    case REDIS_REPLY_NIL:
      return "nil";
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      return "'" + std::string(r.str, r.len) + "'";
    case REDIS_REPLY_ARRAY:
      return "an array of " + std::to_string(r.elements);
    default:
      return "reply type " + std::to_string(r.type);
  }
}

/// One hiredis connection to 127.0.0.1:port; every failure throws.
class redis_conn {
public:
  explicit redis_conn(uint16_t port) {
    ctx_ = redisConnectWithTimeout("127.0.0.1", port, to_timeval(5));
    if (ctx_ == nullptr)
      throw peer_error("redis: cannot allocate a connection");
    if (ctx_->err != 0) {
      std::string what = ctx_->errstr;
      redisFree(ctx_);
      throw peer_error("redis: cannot connect to 127.0.0.1:" +
                       std::to_string(port) + ": " + what);
    }
    redisSetTimeout(ctx_, to_timeval(reply_timeout_s));
  }

  redis_conn(const redis_conn&) = delete;
  redis_conn& operator=(const redis_conn&) = delete;

  ~redis_conn() { redisFree(ctx_); }

  /// Appends one command (argv form, binary safe) to the output buffer.
  void append(std::initializer_list<std::string_view> args) {
    const char* argv[16];
    size_t lens[16];
    int argc = 0;
    for (auto a : args) {
      argv[argc] = a.data();
      lens[argc] = a.size();
      ++argc;
    }
    if (redisAppendCommandArgv(ctx_, argc, argv, lens) != REDIS_OK)
      throw peer_error(std::string{"redis: cannot queue a command: "} +
                       ctx_->errstr);
  }

  /// The next reply (sending whatever is queued first).
  reply_ptr reply() {
    void* raw = nullptr;
    if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr)
      throw peer_error(std::string{"redis: connection failed: "} +
                       (ctx_->errstr[0] != '\0' ? ctx_->errstr : "no reply"));
    return reply_ptr{static_cast<redisReply*>(raw)};
  }

  /// Sends one command and returns its reply.
  reply_ptr command(std::initializer_list<std::string_view> args) {
    append(args);
    return reply();
  }

private:
  redisContext* ctx_ = nullptr;
};

class redis_producer : public producer {
public:
  redis_producer(uint16_t port, size_t payload_bytes)
    : conn_(port), payload_bytes_(payload_bytes) {
    // nop
  }

  /// One ZADD per task, all pipelined, then every reply.
  void schedule(std::span<task_slot> tasks) override {
    auto now = wall_ms();
    for (auto& t : tasks) {
      t.due_ms = now + t.delay_ms;
      t.reference_us = t.due_ms * 1000;
      auto score = std::to_string(t.due_ms);
      auto body = encode_body(t.id, t.due_ms, payload_bytes_);
      conn_.append({"ZADD", "delayed", score, body});
    }
    for (auto& t : tasks) {
      auto r = conn_.reply();
      if (r->type != REDIS_REPLY_INTEGER || r->integer != 1)
        throw peer_error("redis: ZADD of task " + std::to_string(t.id) +
                         " answered " + describe(*r));
    }
  }

private:
  redis_conn conn_;
  size_t payload_bytes_;
};

/// The mover and the consumers of one run, as threads.
class redis_consumers : public thread_consumer_group {
public:
  redis_consumers(uint16_t port, uint32_t count, const peer_options& opts,
                  delivery_log& log)
    : port_(port), batch_(opts.consumer_batch),
      move_batch_(opts.redis_move_batch), log_(log) {
    // Connect (and load the script) before any thread runs, so that a
    // failure surfaces here.
    auto mover = std::make_shared<redis_conn>(port_);
    auto r = mover->command({"SCRIPT", "LOAD", move_script});
    if (r->type != REDIS_REPLY_STRING)
      throw peer_error("redis: SCRIPT LOAD answered " + describe(*r));
    sha_.assign(r->str, r->len);
    spawn([this, mover] { move(*mover); });
    for (uint32_t i = 0; i < count; ++i) {
      auto conn = std::make_shared<redis_conn>(port_);
      spawn([this, conn] { consume(*conn); });
    }
  }

  ~redis_consumers() override { stop(); }

private:
  /// Runs the script in a tight loop while it moves something and every
  /// 1 ms when nothing is due.
  void move(redis_conn& conn) {
    auto limit = std::to_string(move_batch_);
    while (!stopping()) {
      auto now = std::to_string(wall_ms());
      auto r =
        conn.command({"EVALSHA", sha_, "2", "delayed", "ready", now, limit});
      if (r->type != REDIS_REPLY_INTEGER)
        throw peer_error("redis: the mover's script answered " + describe(*r));
      if (r->integer == 0)
        std::this_thread::sleep_for(std::chrono::milliseconds{1});
    }
  }

  /// Each round trip acks the previous round's members (LREM processing)
  /// and takes up to `batch_` new ones (LMOVE ready processing), all
  /// pipelined; when none was ready it blocks in BLMOVE for up to 100 ms.
  void consume(redis_conn& conn) {
    std::vector<std::string> pending;
    auto batch = std::to_string(batch_);
    while (!stopping()) {
      for (auto& m : pending)
        conn.append({"LREM", "processing", "1", m});
      for (uint32_t i = 0; i < batch_; ++i)
        conn.append({"LMOVE", "ready", "processing", "LEFT", "RIGHT"});
      for (auto& m : pending) {
        auto r = conn.reply();
        if (r->type != REDIS_REPLY_INTEGER || r->integer != 1)
          throw peer_error("redis: LREM of '" + m + "' answered " +
                           describe(*r));
      }
      log_.acked(pending.size());
      pending.clear();
      for (uint32_t i = 0; i < batch_; ++i) {
        auto r = conn.reply();
        take(*r, pending);
      }
      if (!pending.empty())
        continue;
      auto r =
        conn.command({"BLMOVE", "ready", "processing", "LEFT", "RIGHT", "0.1"});
      take(*r, pending);
    }
    if (!pending.empty())
      throw peer_error("redis: consumer stopped with unacked members");
  }

  void take(const redisReply& r, std::vector<std::string>& pending) {
    if (r.type == REDIS_REPLY_NIL)
      return;
    if (r.type != REDIS_REPLY_STRING)
      throw peer_error("redis: LMOVE answered " + describe(r));
    pending.emplace_back(r.str, r.len);
    log_.received(pending.back(), wall_us());
  }

  uint16_t port_;
  uint32_t batch_;
  uint32_t move_batch_;
  delivery_log& log_;
  std::string sha_;
};

class redis_peer : public server_peer {
public:
  explicit redis_peer(peer_options opts) : opts_(std::move(opts)) {
    // nop
  }

  std::string name() const override { return "Redis"; }

  std::string usage_scope() const override { return "redis-server process"; }

  void start(const std::filesystem::path& dir) override {
    std::string last_error;
    // A port picked free may be taken before redis binds it: retry.
    for (int attempt = 0; attempt < 3; ++attempt) {
      port_ = pick_free_port();
      std::vector<std::string> argv{opts_.redis_server,
                                    "--bind",
                                    "127.0.0.1",
                                    "--port",
                                    std::to_string(port_),
                                    "--dir",
                                    dir.string(),
                                    "--appendonly",
                                    "yes",
                                    "--appendfsync",
                                    opts_.durability == "sync" ? "always"
                                                               : "everysec",
                                    "--save",
                                    "",
                                    "--auto-aof-rewrite-percentage",
                                    "0",
                                    "--daemonize",
                                    "no",
                                    "--logfile",
                                    opts_.log_path.string()};
      server_.emplace(argv, dir, opts_.log_path);
      if (ready(std::chrono::steady_clock::now() + std::chrono::seconds{30}))
        return;
      last_error =
        server_->running()
          ? "redis-server did not answer PING within 30 s"
          : "redis-server ended (" + server_->exit_description() + ")";
      last_error += "; its log:\n" + server_->log_tail();
      server_->stop();
      server_.reset();
    }
    throw peer_error(last_error);
  }

  std::unique_ptr<producer> make_producer() override {
    return std::make_unique<redis_producer>(port_, opts_.payload_bytes);
  }

  std::unique_ptr<consumer_group> start_consumers(uint32_t count,
                                                  delivery_log& log) override {
    return std::make_unique<redis_consumers>(port_, count, opts_, log);
  }

private:
  /// PING until PONG (redis answers LOADING while it reads its AOF).
  bool ready(steady_time deadline) {
    while (std::chrono::steady_clock::now() < deadline) {
      if (!server_->running())
        return false;
      try {
        redis_conn conn{port_};
        auto r = conn.command({"PING"});
        if (r->type == REDIS_REPLY_STATUS && std::string(r->str) == "PONG")
          return true;
      } catch (const peer_error&) {
        // not listening yet
      }
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
    }
    return false;
  }

  peer_options opts_;
  uint16_t port_ = 0;
};

} // namespace

std::unique_ptr<peer> make_redis_peer(const peer_options& opts) {
  return std::make_unique<redis_peer>(opts);
}

} // namespace dally::bench::peers
