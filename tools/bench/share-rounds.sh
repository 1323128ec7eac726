#!/usr/bin/env bash
# Shares at scale: ROUNDS rounds of `cargo bench --bench shares` with USERS Users and as many
# Shares, each on a fresh control plane (floor A, Homestead, floor B; see
# crates/operator/benches/shares.rs), then each round's ratio to the floors' mean, the operator's
# peak RSS, its writes in steady state and the group change. Each run's whole output is kept in
# $HOMESTEAD_BENCH_LOGS (default: a temporary directory).
#
#   share-rounds.sh [USERS] [ROUNDS]
set -euo pipefail
users=${1:-10000}
rounds=${2:-3}
logs=${HOMESTEAD_BENCH_LOGS:-$(mktemp -d)}
mkdir -p "$logs"
cd "$(dirname "$0")/../.."
cargo bench -q -p homestead --bench shares --no-run

for round in $(seq "$rounds"); do
  log="$logs/shares-$round.log"
  HOMESTEAD_BENCH_USERS=$users cargo bench -q -p homestead --bench shares >"$log" 2>&1 ||
    { echo "round $round failed: $log"; tail -20 "$log"; exit 1; }
  echo "round $round:"
  grep -E '^(floor|homestead|group|shares):' "$log" | sed 's/^/  /'
done
echo "logs: $logs"
