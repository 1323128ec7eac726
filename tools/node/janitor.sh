#!/usr/bin/env bash
# Cleans up after the local node whose files are under <node-dir>, so that stopping a test
# cluster leaves this machine as it was: no container, shim, mount, network namespace, bridge,
# iptables rule or ipset of it is left behind.
#
#   janitor.sh watch <node-dir> <bin-dir> <kube-router>  wait for SIGTERM, then clean up
#   janitor.sh stale <tmp-dir> <bin-dir> <kube-router>   clean up after every node whose
#                                                        directory is <tmp-dir>/homestead-testenv-*-node
#
# The testenv runs `watch` under its watchdog beside kubelet and containerd, so cleanup happens
# however the test process ends; it runs `stale` before a node starts, for a node that crashed.
# Only one node runs on a machine at a time (the testenv holds a lock), so what the node's
# programs made (the kubepods cgroups, cni-* network namespaces, KUBE-* chains) is this node's.
set -uo pipefail
mode=$1 bin=$3 router=$4
case "$mode" in
watch) dirs=("$2") pattern="$2/" ;;
stale) dirs=("$2"/homestead-testenv-*-node) pattern="$2/homestead-testenv-[0-9a-f]+-node/" ;;
*) echo "usage: $0 watch|stale <dir> <bin-dir> <kube-router>" >&2; exit 2 ;;
esac

clean() {
  # Daemons and shims of the node name its directory on their command line.
  for p in $(pgrep -f -- "$pattern" 2>/dev/null); do
    [ "$p" = $$ ] || [ "$p" = "$PPID" ] || kill -KILL "$p" 2>/dev/null
  done
  # Containers: every process in the pod cgroups kubelet made.
  for _ in 1 2 3; do
    pids=$(find /sys/fs/cgroup/pids/kubepods -name cgroup.procs -exec cat {} + 2>/dev/null)
    [ -z "$pids" ] && break
    kill -KILL $pids 2>/dev/null
    sleep 0.2
  done
  pkill -KILL -f 'containerd-shim-runc-v2 -namespace k8s.io' 2>/dev/null
  # Mounts under the node's directory (overlay root filesystems, shm, projected volumes),
  # deepest first; then the pods' network namespaces.
  awk -v re="^$pattern" '$5 ~ re { print $5 }' /proc/self/mountinfo | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null; done
  for ns in /var/run/netns/cni-*; do [ -e "$ns" ] && ip netns delete "$(basename "$ns")" 2>/dev/null; done
  # Rules and sets of kube-proxy and kube-router, with their own cleanup modes.
  "$bin/kube-proxy" --cleanup >/dev/null 2>&1
  "$router" --cleanup-config >/dev/null 2>&1
  # kubelet's own chains (it has no cleanup mode).
  for ipt in iptables ip6tables; do
    for hook in INPUT OUTPUT; do
      while "$ipt" -t filter -D "$hook" -j KUBE-FIREWALL 2>/dev/null; do :; done
    done
    for table in filter nat mangle; do
      for chain in KUBE-FIREWALL KUBE-KUBELET-CANARY; do
        "$ipt" -t "$table" -F "$chain" 2>/dev/null && "$ipt" -t "$table" -X "$chain" 2>/dev/null
      done
    done
  done
  ip link delete homestead0 2>/dev/null
  # The pod cgroups, deepest first, so the next kubelet starts from none.
  for c in /sys/fs/cgroup/*/kubepods; do
    [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  for d in "${dirs[@]}"; do [ -d "$d" ] && rm -rf "$d"; done
}

if [ "$mode" = stale ]; then
  clean
  exit 0
fi
trap 'clean; exit 0' TERM INT
while :; do sleep 3600 & wait $!; done
