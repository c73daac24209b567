#pragma once

// Raw TCP peers of a dallyd for the multi-process suites: they send bytes
// of their choosing (garbage, bare BASP headers) instead of speaking CAF.

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include "process.hpp"

namespace dally::apps::test {

/// A raw TCP connection to 127.0.0.1:port, closed on destruction.
class raw_socket {
public:
  explicit raw_socket(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    BOOST_REQUIRE(fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    BOOST_REQUIRE(
      ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  }

  ~raw_socket() { close(); }

  void close() {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = -1;
  }

  /// Sends what it can of `bytes` (the peer may close early); false once
  /// the peer has closed.
  bool send_all(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      auto n =
        ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

  /// Ends the sending side: the peer reads end-of-stream after the bytes.
  void finish_sending() { ::shutdown(fd_, SHUT_WR); }

  /// Whether the peer closes the connection before `deadline` (reading
  /// and discarding whatever it sends first).
  bool closed_by_peer(steady_clock::time_point deadline) {
    char buf[4096];
    for (;;) {
      pollfd pfd{fd_, POLLIN, 0};
      auto rc = ::poll(&pfd, 1, ms_left(deadline));
      if (rc < 0 && errno == EINTR)
        continue;
      if (rc <= 0)
        return false;
      auto n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
        return true;
    }
  }

private:
  int fd_ = -1;
};

/// A valid BASP client handshake header (CAF 0.17: 32 bytes, network byte
/// order) whose payload length is `payload_len`.
inline std::string basp_client_handshake(uint32_t payload_len) {
  std::string hdr(32, '\0');
  hdr[0] = 0x01; // client_handshake; padding, flags: 0
  for (int i = 0; i < 4; ++i)
    hdr[4 + i] = static_cast<char>((payload_len >> (24 - 8 * i)) & 0xFF);
  hdr[15] = 0x01; // operation_data; source and destination actor: 0
  return hdr;
}

/// Peak resident memory of process `pid` in KiB (VmHWM), 0 if unknown.
inline uint64_t peak_rss_kib(pid_t pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0)
      return std::stoull(line.substr(6));
  return 0;
}

} // namespace dally::apps::test
