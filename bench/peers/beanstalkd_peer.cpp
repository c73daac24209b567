// beanstalkd spoken directly (its text protocol over TCP): producers
// pipeline `put`s with delays in whole seconds, consumers pipeline
// `reserve-with-timeout 0` and `delete` (the ack). beanstalkd runs with its
// binlog, fsync'd after every write (-f 0, sync) or at most every 50 ms
// (-f 50, periodic).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "bench/peers/peer.hpp"
#include "bench/peers/process.hpp"

namespace dally::bench::peers {

namespace {

/// Milliseconds a reply may take before the connection counts as broken
/// (a pipeline of puts each fsync'd on a slow disk takes a while).
constexpr int reply_timeout_ms = 60'000;

/// Seconds a consumer may hold a job before beanstalkd gives it to
/// another (its lease); far above how long the bench holds one.
constexpr int ttr_s = 60;

/// A blocking TCP connection to 127.0.0.1 with a read buffer. `send`
/// reads whatever arrives while it writes, so a long pipeline never
/// deadlocks on full socket buffers.
class tcp_conn {
public:
  explicit tcp_conn(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0)
      throw peer_error(std::string{"socket: "} + std::strerror(errno));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      auto err = std::string{std::strerror(errno)};
      ::close(fd_);
      throw peer_error("beanstalkd: cannot connect to 127.0.0.1:" +
                       std::to_string(port) + ": " + err);
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }

  tcp_conn(const tcp_conn&) = delete;
  tcp_conn& operator=(const tcp_conn&) = delete;

  ~tcp_conn() { ::close(fd_); }

  void send(std::string_view data) {
    while (!data.empty()) {
      pollfd pfd{fd_, POLLIN | POLLOUT, 0};
      wait(pfd);
      if (pfd.revents & POLLIN)
        fill();
      if (pfd.revents & (POLLOUT | POLLERR | POLLHUP)) {
        auto n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
        if (n < 0 && errno != EINTR && errno != EAGAIN)
          throw peer_error(std::string{"beanstalkd: send failed: "} +
                           std::strerror(errno));
        if (n > 0)
          data.remove_prefix(static_cast<size_t>(n));
      }
    }
  }

  /// When the latest bytes arrived (wall clock µs): a line read_line just
  /// returned arrived then or before, and the server sent it before.
  int64_t last_fill_us() const noexcept { return last_fill_us_; }

  /// The next line without its "\r\n".
  std::string read_line() {
    for (;;) {
      if (auto pos = buf_.find("\r\n", start_); pos != std::string::npos) {
        auto line = buf_.substr(start_, pos - start_);
        start_ = pos + 2;
        return line;
      }
      pollfd pfd{fd_, POLLIN, 0};
      wait(pfd);
      fill();
    }
  }

  /// The next `n` bytes followed by "\r\n" (a job body).
  std::string read_body(size_t n) {
    while (buf_.size() - start_ < n + 2) {
      pollfd pfd{fd_, POLLIN, 0};
      wait(pfd);
      fill();
    }
    auto body = buf_.substr(start_, n);
    if (buf_.compare(start_ + n, 2, "\r\n") != 0)
      throw peer_error("beanstalkd: job body not followed by CRLF");
    start_ += n + 2;
    return body;
  }

private:
  void wait(pollfd& pfd) {
    for (;;) {
      auto rc = ::poll(&pfd, 1, reply_timeout_ms);
      if (rc > 0)
        return;
      if (rc == 0)
        throw peer_error("beanstalkd: no answer within " +
                         std::to_string(reply_timeout_ms / 1000) + " s");
      if (errno != EINTR)
        throw peer_error(std::string{"beanstalkd: poll: "} +
                         std::strerror(errno));
    }
  }

  void fill() {
    if (start_ > 0 && start_ == buf_.size()) {
      buf_.clear();
      start_ = 0;
    } else if (start_ > 65536) {
      buf_.erase(0, start_);
      start_ = 0;
    }
    char tmp[65536];
    for (;;) {
      auto n = ::recv(fd_, tmp, sizeof(tmp), MSG_DONTWAIT);
      if (n > 0) {
        last_fill_us_ = wall_us();
        buf_.append(tmp, static_cast<size_t>(n));
        return;
      }
      if (n == 0)
        throw peer_error("beanstalkd closed the connection");
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return;
      throw peer_error(std::string{"beanstalkd: recv failed: "} +
                       std::strerror(errno));
    }
  }

  int fd_ = -1;
  std::string buf_;
  size_t start_ = 0;
  int64_t last_fill_us_ = 0;
};

/// The number after `prefix` in `line` ("INSERTED 17"), or nullopt.
std::optional<uint64_t> number_after(const std::string& line,
                                     std::string_view prefix) {
  if (line.rfind(prefix, 0) != 0)
    return std::nullopt;
  uint64_t x = 0;
  auto first = line.data() + prefix.size();
  auto last = line.data() + line.size();
  auto r = std::from_chars(first, last, x);
  if (r.ec != std::errc{} || first == last)
    return std::nullopt;
  return x;
}

/// Sends `cmd` and expects a reply starting with `expect`.
void expect_reply(tcp_conn& conn, const std::string& cmd,
                  std::string_view expect) {
  conn.send(cmd);
  auto line = conn.read_line();
  if (line.rfind(expect, 0) != 0)
    throw peer_error("beanstalkd: '" + cmd.substr(0, cmd.size() - 2) +
                     "' answered '" + line + "'");
}

class beanstalkd_producer : public producer {
public:
  beanstalkd_producer(uint16_t port, const std::string& tube,
                      size_t payload_bytes)
    : conn_(port), payload_bytes_(payload_bytes) {
    expect_reply(conn_, "use " + tube + "\r\n", "USING");
  }

  /// One `put` per task, all written before the replies are read. The
  /// delay is rounded up to whole seconds (beanstalkd has no finer one);
  /// see task_slot for the due times this gives.
  void schedule(std::span<task_slot> tasks) override {
    out_.clear();
    delays_s_.clear();
    auto now = wall_ms();
    for (auto& t : tasks) {
      auto delay_s = (t.delay_ms + 999) / 1000;
      delays_s_.push_back(delay_s);
      t.due_ms = now + delay_s * 1000;
      auto body = encode_body(t.id, t.due_ms, payload_bytes_);
      out_ += "put 1024 " + std::to_string(delay_s) + " " +
              std::to_string(ttr_s) + " " + std::to_string(body.size()) +
              "\r\n";
      out_ += body;
      out_ += "\r\n";
    }
    conn_.send(out_);
    for (size_t i = 0; i < tasks.size(); ++i) {
      auto line = conn_.read_line();
      if (!number_after(line, "INSERTED "))
        throw peer_error("beanstalkd: put of task " +
                         std::to_string(tasks[i].id) + " answered '" + line +
                         "'");
      tasks[i].reference_us = conn_.last_fill_us() + delays_s_[i] * 1'000'000;
    }
  }

private:
  tcp_conn conn_;
  size_t payload_bytes_;
  std::string out_;
  std::vector<int64_t> delays_s_;
};

class beanstalkd_consumers : public thread_consumer_group {
public:
  beanstalkd_consumers(uint16_t port, const std::string& tube, uint32_t count,
                       uint32_t batch, delivery_log& log)
    : batch_(batch), log_(log) {
    for (uint32_t i = 0; i < count; ++i) {
      auto conn = std::make_shared<tcp_conn>(port);
      expect_reply(*conn, "watch " + tube + "\r\n", "WATCHING");
      expect_reply(*conn, "ignore default\r\n", "WATCHING");
      spawn([this, conn] { consume(*conn); });
    }
  }

  ~beanstalkd_consumers() override { stop(); }

private:
  /// Each round trip deletes (acks) the previous round's jobs and asks
  /// for up to `batch_` ready ones without waiting; when none was ready it
  /// blocks in `reserve-with-timeout 1` (beanstalkd's timeouts are whole
  /// seconds).
  void consume(tcp_conn& conn) {
    std::vector<uint64_t> pending;
    std::string out;
    while (!stopping()) {
      out.clear();
      for (auto id : pending)
        out += "delete " + std::to_string(id) + "\r\n";
      for (uint32_t i = 0; i < batch_; ++i)
        out += "reserve-with-timeout 0\r\n";
      conn.send(out);
      for (auto id : pending) {
        auto line = conn.read_line();
        if (line != "DELETED")
          throw peer_error("beanstalkd: delete " + std::to_string(id) +
                           " answered '" + line + "'");
      }
      log_.acked(pending.size());
      pending.clear();
      for (uint32_t i = 0; i < batch_; ++i)
        take(conn, pending);
      if (!pending.empty())
        continue;
      conn.send("reserve-with-timeout 1\r\n");
      take(conn, pending);
    }
    if (!pending.empty())
      throw peer_error("beanstalkd: consumer stopped with reserved jobs");
  }

  void take(tcp_conn& conn, std::vector<uint64_t>& pending) {
    auto line = conn.read_line();
    if (line == "TIMED_OUT")
      return;
    // "RESERVED <id> <bytes>"
    auto id = number_after(line, "RESERVED ");
    auto space = line.rfind(' ');
    uint64_t bytes = 0;
    if (!id || space == std::string::npos ||
        std::from_chars(line.data() + space + 1, line.data() + line.size(),
                        bytes)
            .ec != std::errc{})
      throw peer_error("beanstalkd: reserve answered '" + line + "'");
    auto body = conn.read_body(bytes);
    log_.received(body, wall_us());
    pending.push_back(*id);
  }

  uint32_t batch_;
  delivery_log& log_;
};

class beanstalkd_peer : public server_peer {
public:
  explicit beanstalkd_peer(peer_options opts) : opts_(std::move(opts)) {
    // nop
  }

  std::string name() const override { return "beanstalkd"; }

  std::string usage_scope() const override { return "beanstalkd process"; }

  void start(const std::filesystem::path& dir) override {
    // A tube per run (the server is fresh as well).
    tube_ = "dally-peers-" + std::to_string(++runs_);
    auto binlog = dir / "binlog";
    make_dirs(binlog);
    std::string last_error;
    for (int attempt = 0; attempt < 3; ++attempt) {
      port_ = pick_free_port();
      std::vector<std::string> argv{opts_.beanstalkd,
                                    "-l",
                                    "127.0.0.1",
                                    "-p",
                                    std::to_string(port_),
                                    "-b",
                                    binlog.string(),
                                    "-f",
                                    opts_.durability == "sync" ? "0" : "50"};
      server_.emplace(argv, dir, opts_.log_path);
      auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds{30};
      if (wait_for_listener(port_, deadline) && server_->running())
        return;
      last_error = server_->running()
                     ? "beanstalkd did not listen within 30 s"
                     : "beanstalkd ended (" + server_->exit_description() + ")";
      last_error += "; its log:\n" + server_->log_tail();
      server_->stop();
      server_.reset();
    }
    throw peer_error(last_error);
  }

  std::unique_ptr<producer> make_producer() override {
    return std::make_unique<beanstalkd_producer>(port_, tube_,
                                                 opts_.payload_bytes);
  }

  std::unique_ptr<consumer_group> start_consumers(uint32_t count,
                                                  delivery_log& log) override {
    return std::make_unique<beanstalkd_consumers>(port_, tube_, count,
                                                  opts_.consumer_batch, log);
  }

private:
  peer_options opts_;
  uint16_t port_ = 0;
  std::string tube_;
  int runs_ = 0;
};

} // namespace

std::unique_ptr<peer> make_beanstalkd_peer(const peer_options& opts) {
  return std::make_unique<beanstalkd_peer>(opts);
}

} // namespace dally::bench::peers
