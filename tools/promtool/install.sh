#!/usr/bin/env bash
# Fetches promtool from Debian's `prometheus` package (apt-get download needs no root) into a
# cache directory keyed by the package version, once, and prints the binary's path.
# $HOMESTEAD_CACHE, default ~/.cache/homestead.
set -euo pipefail
cache=${HOMESTEAD_CACHE:-$HOME/.cache/homestead}/tools
candidate() { apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}'; }
version=$(candidate)
if { [ -z "$version" ] || [ "$version" = "(none)" ]; } && [ "$(id -u)" = 0 ]; then
  # A fresh machine may have no package lists yet.
  apt-get update -qq >&2 || true
  version=$(candidate)
fi
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
  echo "Debian's prometheus package is not known to apt here; run apt-get update" >&2
  exit 1
fi
dest=$cache/promtool-${version//[^A-Za-z0-9.+-]/_}
# Test binaries run in parallel: one fetches it, the others wait for it.
mkdir -p "$cache"
exec 9>"$dest.lock"
flock 9
if [ ! -x "$dest/promtool" ]; then
  echo "fetching promtool from Debian prometheus $version (once)" >&2
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && apt-get download -q "prometheus=$version" >&2)
  dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
  mkdir -p "$dest.tmp"
  cp "$work/root/usr/bin/promtool" "$dest.tmp/promtool"
  rm -rf "$dest" && mv "$dest.tmp" "$dest"
fi
echo "$dest/promtool"
