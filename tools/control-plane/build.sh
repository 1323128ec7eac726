#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager, kubectl) from the
# Go modules pinned in go.mod/go.sum beside this script, into a version-keyed cache directory
# outside the checkout, and prints that directory on stdout. Does nothing when the binaries are
# already there. Concurrent callers wait on a lock instead of building twice.
#
#   HOMESTEAD_CACHE   cache root (default: ~/.cache/homestead)
#   KUBEBUILDER_ASSETS  if it names a directory holding kube-apiserver, etcd and
#                     kube-controller-manager, that directory is printed and nothing is built
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
binaries=(etcd kube-apiserver kube-controller-manager kubectl)

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]] &&
  [[ -x "$KUBEBUILDER_ASSETS/kube-apiserver" && -x "$KUBEBUILDER_ASSETS/etcd" &&
    -x "$KUBEBUILDER_ASSETS/kube-controller-manager" ]]; then
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

# Versions come from go.mod, so bumping a pin there changes the cache key too.
k8s=$(awk '$1 == "k8s.io/kubernetes" && NF > 1 { print $2 }' "$here/go.mod")
etcd=$(awk '$1 == "go.etcd.io/etcd/server/v3" && NF > 1 { print $2 }' "$here/go.mod")
cache="${HOMESTEAD_CACHE:-$HOME/.cache/homestead}"
dir="$cache/control-plane/kubernetes-$k8s-etcd-$etcd"

complete() {
  for b in "${binaries[@]}"; do [[ -x "$dir/$b" ]] || return 1; done
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
staging=$(mktemp -d "$cache/control-plane/.build.XXXXXX")
trap 'rm -rf "$staging"' EXIT

echo "building control plane $k8s (etcd $etcd) into $dir; the first build takes several minutes" >&2
start=$(date +%s)
cd "$here"
go build -trimpath -ldflags "-s -w" -o "$staging/etcd" go.etcd.io/etcd/server/v3 >&2
for cmd in kube-apiserver kube-controller-manager kubectl; do
  go build -trimpath -ldflags "-s -w $version_flags" -o "$staging/$cmd" "k8s.io/kubernetes/cmd/$cmd" >&2
done
rm -rf "$dir"
mv "$staging" "$dir"
trap - EXIT
echo "control plane built in $(($(date +%s) - start)) s" >&2
echo "$dir"
