#!/usr/bin/env bash
# Prints the directory holding prometheus-operator's CRDs (ServiceMonitor, PrometheusRule, ...),
# fetched once from the project's Go module (github.com/prometheus-operator/prometheus-operator,
# its example/prometheus-operator-crd), since release assets are not reachable here.
set -euo pipefail
version=v0.85.0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
go mod init crds.local >/dev/null 2>&1
dir=$(GOFLAGS=-mod=mod go mod download -json "github.com/prometheus-operator/prometheus-operator@$version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$dir/example/prometheus-operator-crd" ] || { echo "no CRDs in $dir" >&2; exit 1; }
echo "$dir/example/prometheus-operator-crd"
