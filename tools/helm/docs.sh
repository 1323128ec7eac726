#!/usr/bin/env bash
# Writes charts/homestead/README.md from Chart.yaml and the `# --` comments in values.yaml with
# helm-docs (built from its Go module, pinned, once, into $HOMESTEAD_CACHE), or with --check
# fails if the committed README differs from what it would write.
set -euo pipefail
version=v1.14.2
root=$(cd "$(dirname "$0")/../.." && pwd)
dest=${HOMESTEAD_CACHE:-$HOME/.cache/homestead}/tools/helm-docs-$version
mkdir -p "${dest%/*}"
{
  flock 9 # callers in parallel: one builds, the others wait for it
  if [ ! -x "$dest/helm-docs" ]; then
    echo "building helm-docs $version from github.com/norwoodj/helm-docs (once)" >&2
    GOBIN="$dest.tmp" GOFLAGS=-mod=mod CGO_ENABLED=0 \
      go install "github.com/norwoodj/helm-docs/cmd/helm-docs@$version" >&2
    rm -rf "$dest" && mv "$dest.tmp" "$dest"
  fi
} 9>"$dest.lock"
cd "$root/charts"
if [ "${1:-}" = --check ]; then
  "$dest/helm-docs" --chart-search-root homestead --dry-run --log-level warning |
    diff -u homestead/README.md - ||
    { echo "charts/homestead/README.md is stale: run tools/helm/docs.sh (just generate does)" >&2; exit 1; }
else
  "$dest/helm-docs" --chart-search-root homestead --log-level warning
fi
