#!/usr/bin/env bash
# Builds krew, kubectl's plugin manager, from its Go module (pinned) into the cache, once, and
# prints the binary's path. $HOMESTEAD_CACHE, default ~/.cache/homestead.
set -euo pipefail
version=v0.4.3
dest=${HOMESTEAD_CACHE:-$HOME/.cache/homestead}/tools/krew-$version
if [ ! -x "$dest/krew" ]; then
  mkdir -p "$dest"
  # Test binaries run in parallel: one builds it, the others wait for it.
  exec 9>"$dest.lock"
  flock 9
  if [ ! -x "$dest/krew" ]; then
    GOBIN="$dest" GOFLAGS=-mod=mod go install "sigs.k8s.io/krew/cmd/krew@$version" >&2
  fi
fi
echo "$dest/krew"
