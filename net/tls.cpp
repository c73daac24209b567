#include "net/tls.hpp"

#include <memory>

#include <caf/actor_system_config.hpp>
#include <caf/openssl/manager.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace dally::net {

namespace {

/// OpenSSL's queued errors as one line.
std::string ssl_errors() {
  std::string out;
  while (auto err = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(err, buf, sizeof(buf));
    if (!out.empty())
      out += "; ";
    out += buf;
  }
  return out;
}

} // namespace

std::optional<std::string> check_tls_files(const tls_files& files) {
  if (files.cert.empty() || files.key.empty() || files.ca.empty())
    return "TLS needs a certificate, its key and a certificate authority "
           "(--tls-cert, --tls-key, --tls-ca)";
  std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> ctx{SSL_CTX_new(TLS_method()),
                                                   SSL_CTX_free};
  if (!ctx)
    return "cannot create a TLS context: " + ssl_errors();
  ERR_clear_error();
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), files.cert.c_str()) != 1)
    return "cannot load the certificate " + files.cert + ": " + ssl_errors();
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), files.key.c_str(),
                                  SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx.get()) != 1)
    return "the private key " + files.key +
           " cannot be loaded or does not belong to the certificate " +
           files.cert + ": " + ssl_errors();
  if (SSL_CTX_load_verify_locations(ctx.get(), files.ca.c_str(), nullptr) != 1)
    return "cannot load the certificate authority " + files.ca + ": " +
           ssl_errors();
  return std::nullopt;
}

void enable_tls(caf::actor_system_config& cfg, const tls_files& files) {
  cfg.load<caf::openssl::manager>();
  cfg.openssl_certificate = files.cert;
  cfg.openssl_key = files.key;
  cfg.openssl_cafile = files.ca;
}

} // namespace dally::net
