# Sourced by rounds.sh and layers.sh: keeps each run's output in $logs ($HOMESTEAD_BENCH_LOGS,
# default a temporary directory), moves to the repository's root and builds the bench.
logs=${HOMESTEAD_BENCH_LOGS:-$(mktemp -d)}
mkdir -p "$logs"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
cargo bench -q -p homestead --bench converge --no-run

# The seconds to all Ready, and kube-apiserver's and etcd's ms per User while provisioning
# (the last CPU table), in the output of one run.
figures() {
  local seconds apiserver etcd
  seconds=$(grep -Eo '(provisioned|all Ready) in [0-9.]+ s' "$1" | grep -Eo '[0-9.]+' | sed -n 1p)
  apiserver=$(grep -E '^ +kube-apiserver ' "$1" | tail -1 | awk '{print $2}')
  etcd=$(grep -E '^ +etcd ' "$1" | tail -1 | awk '{print $2}')
  echo "$seconds $apiserver $etcd"
}
