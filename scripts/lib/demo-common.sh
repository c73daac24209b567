# shellcheck shell=bash
# The variables these functions set are the caller's:
# shellcheck disable=SC2034
# Sourced by scripts/demo.sh and scripts/cluster-demo.sh (from the
# repository's root): their options and their Release build of dallyd and
# dallyctl.

# demo_options NAME MIN_COUNT HELP_LINES ARGS...: reads --count N and
# --data-dir DIR from ARGS into $count and $data (the caller sets their
# defaults); -h/--help prints the lines HELP_LINES (e.g. 2,11) of the
# caller's header comment. Exits 2 on an unknown argument or a count
# outside [MIN_COUNT, 1000].
demo_options() {
  local name=$1 min=$2 help=$3
  shift 3
  while [ $# -gt 0 ]; do
    case "$1" in
      --count) count=$2; shift 2 ;;
      --data-dir) data=$2; shift 2 ;;
      -h|--help)
        sed -n "${help}p" "$0" | sed 's/^# \{0,1\}//'
        exit 0 ;;
      *) echo "$name: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
  done
  if ! [[ "$count" =~ ^[0-9]+$ ]] || [ "$count" -lt "$min" ] \
    || [ "$count" -gt 1000 ]; then
    echo "$name: --count must be in [$min, 1000]" >&2
    exit 2
  fi
}

# demo_build TARGETS...: installs what is missing and builds TARGETS in
# Release in $DALLY_DEMO_BUILD_DIR (default build/release); sets $build,
# $dallyd and $dallyctl.
demo_build() {
  bash scripts/install-deps.sh
  build=${DALLY_DEMO_BUILD_DIR:-build/release}
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDALLY_BUILD_BENCH=OFF \
    >/dev/null
  cmake --build "$build" -j2 --target "$@"
  dallyd=$build/apps/dallyd
  dallyctl=$build/apps/dallyctl
}
