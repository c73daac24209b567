#pragma once

// Throwaway certificate authorities and certificates, made at test time by
// the openssl command, for the TLS suites.

#include <chrono>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "process.hpp"

namespace dally::apps::test {

/// Runs the openssl command in `dir` (an argument "@x" names the file x in
/// `dir`); fails the test if it fails.
inline void openssl(const temp_dir& dir, std::vector<std::string> args) {
  args.insert(args.begin(), "/usr/bin/openssl");
  for (auto& a : args)
    if (a.rfind("@", 0) == 0)
      a = dir.str(a.substr(1));
  auto r = run(args, {}, std::chrono::seconds{60});
  BOOST_REQUIRE_MESSAGE(r.code == 0,
                        "openssl exit " << r.code << ": " << r.err);
}

/// A certificate authority `name`.pem with its key `name`.key.
inline void make_ca(const temp_dir& dir, const std::string& name) {
  openssl(dir, {"req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                "@" + name + ".key", "-out", "@" + name + ".pem", "-days", "2",
                "-subj", "/CN=" + name});
}

/// A certificate `name`.pem with its key `name`.key, signed by `ca`.
inline void make_cert(const temp_dir& dir, const std::string& name,
                      const std::string& ca) {
  openssl(dir,
          {"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
           "-nodes", "-keyout", "@" + name + ".key", "-out",
           "@" + name + ".csr", "-subj", "/CN=" + name});
  openssl(dir, {"x509", "-req", "-in", "@" + name + ".csr", "-CA",
                "@" + ca + ".pem", "-CAkey", "@" + ca + ".key",
                "-CAcreateserial", "-out", "@" + name + ".pem", "-days", "2"});
}

/// dallyctl's (or dallyd's) TLS options for `cert` and `ca`.
inline std::vector<std::string>
tls_args(const temp_dir& dir, const std::string& cert, const std::string& ca) {
  return {"--tls-cert", dir.str(cert + ".pem"),
          "--tls-key",  dir.str(cert + ".key"),
          "--tls-ca",   dir.str(ca + ".pem")};
}

} // namespace dally::apps::test
