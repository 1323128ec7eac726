#!/usr/bin/env bash
# The access, attack and e2e test binaries on each older supported Kubernetes (one directory of
# pinned Go modules each under tools/control-plane/, today 1.30, the oldest the chart's
# kubeVersion admits); `just test` runs every binary on the pinned current version. Each
# version's kube-apiserver and kube-controller-manager are built once into the cache
# (tools/control-plane/build.sh DIR) and chosen with KUBEBUILDER_ASSETS. Prints how long each
# version's build and tests took; exits non-zero on the first failure.
#
#   matrix.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
for module in tools/control-plane/1.30; do
  start=$SECONDS
  dir=$(tools/control-plane/build.sh "$module")
  built=$((SECONDS - start))
  version=$("$dir/kube-apiserver" --version)
  echo "=== $version ($dir): binaries ready in $built s"
  start=$SECONDS
  KUBEBUILDER_ASSETS=$dir cargo test -q -p homestead --test access --test attacks --test e2e
  echo "=== $version: access, attacks and e2e passed in $((SECONDS - start)) s"
done
