#!/usr/bin/env bash
# Builds Helm from its Go module (no release binaries are reachable here) into a cache directory
# keyed by version, once, and prints the binary's path. $HOMESTEAD_CACHE, default
# ~/.cache/homestead.
set -euo pipefail
version=v3.22.0
dest=${HOMESTEAD_CACHE:-$HOME/.cache/homestead}/tools/helm-$version
if [ ! -x "$dest/helm" ]; then
  echo "building helm $version from helm.sh/helm/v3 (once; a few minutes)" >&2
  GOBIN="$dest.tmp" GOFLAGS=-mod=mod CGO_ENABLED=0 go install "helm.sh/helm/v3/cmd/helm@$version" >&2
  rm -rf "$dest" && mv "$dest.tmp" "$dest"
fi
echo "$dest/helm"
