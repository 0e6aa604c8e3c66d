#!/usr/bin/env bash
# Debian's Prometheus server and promtool for the tests (tests/deploy/test_prometheus_*.py).
#
#   scripts/prometheus.sh fetch    get Debian's `prometheus` package with apt, unpack it into the
#                                  cache (first run only) and print the directory that holds
#                                  `prometheus` and `promtool` on stdout
#   scripts/prometheus.sh version  print the version of the binaries `fetch` would use
#
# The package is downloaded with `apt-get download` and unpacked with `dpkg-deb -x` into the
# cache: no root needed, nothing installed system-wide, and no Prometheus daemon started by the
# package's maintainer scripts on a shared machine. The binaries are static Go programs (libc
# only), so they run from the cache as they are.
#
# Environment (all optional):
#   DPBANDIT_PROMETHEUS_BIN_DIR  use this directory (holding prometheus and promtool) instead;
#                                for machines without apt
#   DPBANDIT_PROMETHEUS_CACHE    unpacked packages              [$REPO/.cache/prometheus]
#
# Every failure says why and exits non-zero: there is no silent fallback.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${DPBANDIT_PROMETHEUS_CACHE:-$REPO/.cache/prometheus}

die() {
  echo "prometheus.sh: $*" >&2
  exit 1
}

check_dir() { # a directory with working prometheus and promtool binaries
  local dir=$1
  for b in prometheus promtool; do
    [ -x "$dir/$b" ] || die "no executable $b in $dir"
    "$dir/$b" --version >/dev/null 2>&1 || die "$dir/$b --version failed"
  done
}

candidate_version() {
  apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2; exit}'
}

fetch() {
  if [ -n "${DPBANDIT_PROMETHEUS_BIN_DIR:-}" ]; then
    check_dir "$DPBANDIT_PROMETHEUS_BIN_DIR"
    echo "$DPBANDIT_PROMETHEUS_BIN_DIR"
    return
  fi
  command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 ||
    die "apt-get/dpkg-deb not found: the Prometheus tests use Debian's prometheus package" \
      "(Debian or Ubuntu). Elsewhere, set DPBANDIT_PROMETHEUS_BIN_DIR to a directory holding" \
      "prometheus and promtool (2.42 or newer)."
  local version
  version=$(candidate_version)
  if [ -z "$version" ] || [ "$version" = "(none)" ]; then
    if [ "$(id -u)" = 0 ]; then
      echo "prometheus.sh: apt does not know the prometheus package yet; running apt-get update" >&2
      apt-get update -qq >&2 || die "apt-get update failed (no network or no Debian mirror?)"
      version=$(candidate_version)
    fi
    [ -n "$version" ] && [ "$version" != "(none)" ] ||
      die "apt has no candidate for the prometheus package: run 'apt-get update' as root" \
        "(and check that the main component of a Debian/Ubuntu mirror is configured)"
  fi
  local dir=$CACHE/${version//[:\/]/_}
  if [ ! -f "$dir/.fetched" ]; then
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.lock"
    flock 9
    if [ ! -f "$dir/.fetched" ]; then
      local tmp
      tmp=$(mktemp -d "$CACHE/fetch.XXXXXX")
      echo "prometheus.sh: fetching Debian's prometheus $version with apt-get download" >&2
      if ! (cd "$tmp" && apt-get download -q "prometheus=$version" >"$tmp/apt.log" 2>&1); then
        cat "$tmp/apt.log" >&2
        rm -rf "$tmp"
        die "apt-get download prometheus=$version failed (messages above); if the mirror has" \
          "moved on, run 'apt-get update' as root"
      fi
      dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/root" || {
        rm -rf "$tmp"
        die "dpkg-deb could not unpack the package"
      }
      rm -rf "$dir"
      mkdir -p "$dir"
      mv "$tmp/root/usr/bin" "$dir/bin"
      rm -rf "$tmp"
      check_dir "$dir/bin"
      touch "$dir/.fetched"
      echo "prometheus.sh: $("$dir/bin/promtool" --version 2>&1 | head -1) in $dir/bin" >&2
    fi
    flock -u 9
  fi
  check_dir "$dir/bin"
  echo "$dir/bin"
}

case "${1:-}" in
  fetch) fetch ;;
  version)
    dir=$(fetch)
    "$dir/promtool" --version 2>&1 | head -1
    ;;
  *)
    echo "usage: scripts/prometheus.sh fetch|version" >&2
    exit 2
    ;;
esac
