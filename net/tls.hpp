#pragma once

#include <optional>
#include <string>

#include <caf/fwd.hpp>

namespace dally::net {

/// The files of TLS on the CAF port, all PEM. Both ends need all three:
/// a node accepts only clients whose certificate `ca` signed, and a client
/// talks only to a node whose certificate `ca` signed. Host names are not
/// checked: whoever holds a certificate of that authority is trusted.
struct tls_files {
  /// The certificate chain this end shows.
  std::string cert;
  /// Its private key (unencrypted).
  std::string key;
  /// The certificate authority the other end must be signed by.
  std::string ca;
};

/// Checks that `files` can be loaded and that the key belongs to the
/// certificate: a reason for the user if not. CAF reloads the files for
/// every connection and fails hard on a bad one, so check at start.
std::optional<std::string> check_tls_files(const tls_files& files);

/// Loads CAF's OpenSSL module into `cfg` with `files`, after
/// `enable_network` and before the actor_system is created; then
/// publish_options::tls and connect_options::tls may be set.
void enable_tls(caf::actor_system_config& cfg, const tls_files& files);

} // namespace dally::net
