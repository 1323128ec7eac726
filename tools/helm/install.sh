#!/usr/bin/env bash
# Builds Helm from its Go module (no release binaries are reachable here) into a cache directory
# keyed by version, once, and prints the binary's path. $HOMESTEAD_CACHE, default
# ~/.cache/homestead. The binary carries the version ldflags a released Helm has (its Makefile's):
# its own version, and the Kubernetes version `helm template` and `helm lint` assume without
# --kube-version, taken from the client-go its go.mod requires (v0.N.x is Kubernetes 1.N).
set -euo pipefail
version=v3.22.0
dest=${HOMESTEAD_CACHE:-$HOME/.cache/homestead}/tools/helm-$version-released
# Test binaries run in parallel and several need Helm: one builds it, the others wait for it.
mkdir -p "${dest%/*}"
exec 9>"$dest.lock"
flock 9
if [ ! -x "$dest/helm" ]; then
  echo "building helm $version from helm.sh/helm/v3 (once; a few minutes)" >&2
  gomod=$(GOFLAGS=-mod=mod go mod download -json "helm.sh/helm/v3@$version" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  minor=$(sed -n 's|^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*|\1|p' "$gomod")
  [ -n "$minor" ] || { echo "no k8s.io/client-go in $gomod" >&2; exit 1; }
  ldflags="-w -s -X helm.sh/helm/v3/internal/version.version=$version"
  for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ldflags="$ldflags -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
  done
  GOBIN="$dest.tmp" GOFLAGS=-mod=mod CGO_ENABLED=0 go install -ldflags "$ldflags" \
    "helm.sh/helm/v3/cmd/helm@$version" >&2
  rm -rf "$dest" && mv "$dest.tmp" "$dest"
fi
echo "$dest/helm"
