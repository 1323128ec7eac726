#!/usr/bin/env bash
# Provisioning of USERS Users by each side alone on a fresh control plane (the bounded floor,
# Homestead, the bare floor: `HOMESTEAD_BENCH_QUICK=floor|homestead|bare`), ROUNDS rounds in
# turn, every other round in reverse order (so no side always runs first or last), then per side
# the range of the time to all Ready and of kube-apiserver's and etcd's CPU per User, and the
# range and median of Homestead's ratio to each floor of the same round. One run says little on
# a small shared machine (docs/performance.md); the ratios within a round are what to compare.
# Each run's whole output is kept in $HOMESTEAD_BENCH_LOGS (default: a temporary directory).
#
#   rounds.sh [USERS] [ROUNDS]
set -euo pipefail
users=${1:-10000}
rounds=${2:-3}
# shellcheck source=tools/bench/common.sh
source "$(dirname "$0")/common.sh"

for round in $(seq "$rounds"); do
  sides=(floor homestead bare)
  if ((round % 2 == 0)); then sides=(bare homestead floor); fi
  for side in "${sides[@]}"; do
    log="$logs/$side-$round.log"
    HOMESTEAD_BENCH_USERS=$users HOMESTEAD_BENCH_QUICK=$side \
      cargo bench -q -p homestead --bench converge >"$log" 2>&1 ||
      { echo "$side, round $round failed: $log"; tail -20 "$log"; exit 1; }
    read -r seconds apiserver etcd < <(figures "$log")
    printf 'round %s  %-9s %7.1f s  %6.2f ms of kube-apiserver, %5.2f ms of etcd per User\n' \
      "$round" "$side" "$seconds" "$apiserver" "$etcd"
    echo "$round $side $seconds $apiserver $etcd" >>"$logs/figures"
  done
done

echo
echo "$users Users, $rounds rounds (logs: $logs):"
awk '
  { t[$2] = t[$2] " " $3; a[$2] = a[$2] " " $4; e[$2] = e[$2] " " $5; s[$1, $2] = $3 }
  function range(list,   n, v, i, lo, hi) {
    n = split(list, v, " "); lo = v[1]; hi = v[1]
    for (i = 2; i <= n; i++) { if (v[i] + 0 < lo + 0) lo = v[i]; if (v[i] + 0 > hi + 0) hi = v[i] }
    return lo "-" hi
  }
  function median(list,   n, v, i, j, t) {
    n = split(list, v, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
    return n % 2 ? v[(n + 1) / 2] : sprintf("%.2f", (v[n / 2] + v[n / 2 + 1]) / 2)
  }
  END {
    printf "  %-10s all Ready %-13s kube-apiserver %s, etcd %s ms per User\n", "bounded", range(t["floor"]) " s", range(a["floor"]), range(e["floor"])
    printf "  %-10s all Ready %-13s kube-apiserver %s, etcd %s ms per User\n", "Homestead", range(t["homestead"]) " s", range(a["homestead"]), range(e["homestead"])
    printf "  %-10s all Ready %-13s kube-apiserver %s, etcd %s ms per User\n", "bare", range(t["bare"]) " s", range(a["bare"]), range(e["bare"])
    for (r = 1; (r, "homestead") in s; r++) {
      bounded = bounded " " sprintf("%.2f", s[r, "homestead"] / s[r, "floor"])
      bare = bare " " sprintf("%.2f", s[r, "homestead"] / s[r, "bare"])
      floors = floors " " sprintf("%.2f", s[r, "floor"] / s[r, "bare"])
    }
    printf "  Homestead / bounded floor, each round: %s x (median %s)\n", range(bounded), median(bounded)
    printf "  Homestead / bare floor, each round:    %s x (median %s)\n", range(bare), median(bare)
    printf "  bounded / bare floor, each round:      %s x (median %s)\n", range(floors), median(floors)
  }' "$logs/figures"
