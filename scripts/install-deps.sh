#!/usr/bin/env bash
# Installs the Debian packages Dally builds against, when any is missing,
# and the servers the peers benchmark and its smoke test start (beanstalkd,
# redis-server; hiredis is its Redis client). As root it installs them;
# otherwise it prints the exact command and stops.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libcaf-dev libssl-dev openssl
  libprotobuf-dev protobuf-compiler
  librocksdb-dev
  libboost-dev libboost-test-dev
  libhowardhinnant-date-dev tzdata
  libabsl-dev
  libbenchmark-dev
  libjemalloc-dev
  beanstalkd redis-server libhiredis-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "Dally needs these Debian packages: ${missing[*]}" >&2
  echo "Run as root:" >&2
  echo "  $cmd" >&2
  exit 1
fi

echo "installing: ${missing[*]}"
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
