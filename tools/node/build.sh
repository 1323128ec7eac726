#!/usr/bin/env bash
# Prepares what the local node needs besides kubelet and kube-proxy (tools/control-plane/build.sh
# builds those), into a version-keyed cache directory outside the checkout, and prints that
# directory on stdout. Does nothing when everything is there; concurrent callers wait on a lock.
#
# - Debian packages: containerd and runc (the container runtime), containernetworking-plugins
#   (pod networking: bridge, host-local, loopback, portmap), iptables, ipset and conntrack (for
#   kube-proxy and kube-router), umoci (packs OCI images without a registry) and busybox-static
#   (the toolbox image). Installed with apt-get when missing, which needs root.
# - kube-router, the NetworkPolicy implementation (only its firewall runs), built from the Go
#   module pinned in go.mod beside this script.
# - images, as OCI archives for `ctr images import` (images/<name>.tar, with the reference it is
#   imported as in images/<name>.ref): the pause image (sandbox of every Pod), from pause.c of the
#   pinned k8s.io/kubernetes module, and homestead.local/toolbox (busybox and kubectl) for tests'
#   Pods.
#
#   HOMESTEAD_CACHE   cache root (default: ~/.cache/homestead)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
packages=(containerd runc containernetworking-plugins iptables ipset conntrack umoci busybox-static)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "the local node needs the Debian packages ${missing[*]}; install them as root (apt-get install ${missing[*]})" >&2
    exit 1
  fi
  echo "installing Debian packages ${missing[*]} for the local node (once)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 ||
    { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; }
fi

k8s=$(awk '$1 == "k8s.io/kubernetes" && NF > 1 { print $2 }' "$here/../control-plane/go.mod")
kubernetes=$("$here/../control-plane/build.sh")
router=$(awk '$1 == "github.com/cloudnativelabs/kube-router/v2" && NF > 1 { print $2 }' "$here/go.mod")
busybox=$(dpkg-query -W -f='${Version}' busybox-static)
cache="${HOMESTEAD_CACHE:-$HOME/.cache/homestead}"
# The key names every input, this script's own recipe included (its contents, not its path:
# every clone of the repository shares one build).
recipe=$(cat "${BASH_SOURCE[0]}" "$here/../image/oci.sh" | sha256sum | cut -c1-8)
dir="$cache/node/kube-router-$router-kubernetes-$k8s-busybox-${busybox//[^A-Za-z0-9.+-]/_}-$recipe"

complete() {
  [[ -x "$dir/kube-router" && -f "$dir/images/pause.ref" && -f "$dir/images/toolbox.ref" ]]
}
if complete; then
  echo "$dir"
  exit 0
fi

mkdir -p "$cache/node"
exec 9>"$cache/node/.build.lock"
flock 9
if complete; then
  echo "$dir"
  exit 0
fi
start=$(date +%s)
mkdir -p "$dir/images"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
if [ ! -x "$dir/kube-router" ]; then
  echo "building kube-router $router into $dir; a first build takes minutes" >&2
  (cd "$here" && go build -trimpath -ldflags "-s -w" -o "$dir/.kube-router.partial" \
    github.com/cloudnativelabs/kube-router/v2/cmd/kube-router >&2)
  mv "$dir/.kube-router.partial" "$dir/kube-router"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The pause image: Kubernetes' own pause.c, from the same module as kubelet.
source=$(cd "$here/../control-plane" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
mkdir -p "$work/pause"
gcc -Os -static -Wall -DVERSION="$k8s" -o "$work/pause/pause" "$source/build/pause/linux/pause.c"
"$here/../image/oci.sh" "$work/pause" "$dir/images/pause.tar" "$k8s" 65535:65535 /pause
echo "homestead.local/pause:$k8s" >"$dir/images/pause.ref"
# The test image: busybox (sh, nc, httpd) and kubectl (which uses a Pod's ServiceAccount token),
# as a non-root user, so it passes Pod Security's restricted level.
mkdir -p "$work/toolbox/bin" "$work/toolbox/tmp"
cp /bin/busybox "$work/toolbox/bin/busybox"
for applet in sh nc httpd sleep cat echo printf ls env id head grep; do ln -s busybox "$work/toolbox/bin/$applet"; done
cp "$kubernetes/kubectl" "$work/toolbox/bin/kubectl"
chmod 1777 "$work/toolbox/tmp"
# Named user and group entries: kubelet passes the image's uid alone as runAsUser, and the
# runtime looks the group up here (without them a Pod would run with gid 0).
mkdir -p "$work/toolbox/etc"
echo 'nobody:x:65534:65534:nobody:/tmp:/bin/sh' >"$work/toolbox/etc/passwd"
echo 'nogroup:x:65534:' >"$work/toolbox/etc/group"
tag="${busybox//[^A-Za-z0-9.-]/_}-kubectl-$k8s"
"$here/../image/oci.sh" "$work/toolbox" "$dir/images/toolbox.tar" "$tag" 65534:65534 /bin/sh
echo "homestead.local/toolbox:$tag" >"$dir/images/toolbox.ref"
echo "node tools ready in $(($(date +%s) - start)) s" >&2
echo "$dir"
