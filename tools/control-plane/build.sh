#!/usr/bin/env bash
# Builds the local cluster's Kubernetes binaries (etcd, kube-apiserver, kube-controller-manager,
# kubectl, and for the node kube-scheduler, kubelet and kube-proxy) from the Go modules pinned in
# go.mod/go.sum beside this script, into a version-keyed cache directory outside the checkout, and
# prints that directory on stdout. Builds only the binaries missing there, so a cache made before
# the node existed gains the node's binaries without rebuilding the rest. Concurrent callers wait on a
# lock instead of building twice.
#
#   build.sh [MODULE_DIR]
#
# MODULE_DIR: a directory whose go.mod/go.sum pin an older supported Kubernetes (such as
# tools/control-plane/1.30, the oldest the chart supports): only its kube-apiserver and
# kube-controller-manager are built; etcd and kubectl are the pinned current ones (etcd serves
# every supported kube-apiserver; kubectl is only the tests' client), linked into its cache
# directory, so `KUBEBUILDER_ASSETS=<that directory>` runs the tests on the older control plane
# (`just test-matrix`). No node binaries for an older version.
#
#   HOMESTEAD_CACHE   cache root (default: ~/.cache/homestead)
#   KUBEBUILDER_ASSETS  if it names a directory holding kube-apiserver, etcd and
#                     kube-controller-manager, that directory is printed and nothing is built
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module=$here
binaries=(etcd kube-apiserver kube-controller-manager kubectl kubelet kube-proxy kube-scheduler)
if [[ $# -gt 0 ]]; then
  module=$(cd "$1" && pwd)
  if [[ $module != "$here" ]]; then
    current=$("$here/build.sh") # the pinned current version first: its etcd and kubectl
    binaries=(kube-apiserver kube-controller-manager)
  fi
fi

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]] &&
  [[ -x "$KUBEBUILDER_ASSETS/kube-apiserver" && -x "$KUBEBUILDER_ASSETS/etcd" &&
    -x "$KUBEBUILDER_ASSETS/kube-controller-manager" ]]; then
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

# Versions come from go.mod, so bumping a pin there changes the cache key too.
k8s=$(awk '$1 == "k8s.io/kubernetes" && NF > 1 { print $2 }' "$module/go.mod")
etcd=$(awk '$1 == "go.etcd.io/etcd/server/v3" && NF > 1 { print $2 }' "$here/go.mod")
cache="${HOMESTEAD_CACHE:-$HOME/.cache/homestead}"
dir="$cache/control-plane/kubernetes-$k8s-etcd-$etcd"

complete() {
  for b in "${binaries[@]}"; do [[ -x "$dir/$b" ]] || return 1; done
  [[ -z "${current:-}" ]] || { [[ -x "$dir/etcd" ]] && [[ -x "$dir/kubectl" ]]; }
}

if complete; then
  echo "$dir"
  exit 0
fi

mkdir -p "$cache/control-plane"
exec 9>"$cache/control-plane/.build.lock"
flock 9
if complete; then # another caller built it while we waited
  echo "$dir"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
minor=${k8s#v1.}
minor=${minor%%.*}
version_flags="-X k8s.io/component-base/version.gitVersion=$k8s -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
mkdir -p "$dir"
start=$(date +%s)
cd "$module"
if [[ -n "${current:-}" ]]; then
  ln -sfn "$current/etcd" "$dir/etcd"
  ln -sfn "$current/kubectl" "$dir/kubectl"
fi
for b in "${binaries[@]}"; do
  [[ -x "$dir/$b" ]] && continue
  echo "building $b ($k8s, etcd $etcd) into $dir; a first build takes minutes" >&2
  case "$b" in
  etcd) go build -trimpath -ldflags "-s -w" -o "$dir/.$b.partial" go.etcd.io/etcd/server/v3 >&2 ;;
  *) go build -trimpath -ldflags "-s -w $version_flags" -o "$dir/.$b.partial" "k8s.io/kubernetes/cmd/$b" >&2 ;;
  esac
  mv "$dir/.$b.partial" "$dir/$b" # a build cut short never leaves a binary that looks complete
done
echo "Kubernetes binaries built in $(($(date +%s) - start)) s" >&2
echo "$dir"
