#!/usr/bin/env bash
# What each of Homestead's safety layers costs the bounded floor: its provisioning of USERS
# Users on a fresh control plane, whole and less its layers in turn
# (`HOMESTEAD_BENCH_FLOOR_WITHOUT`: the operator's admission policies; its identity; the policies
# and Homestead's objects, which the policies would refuse), and the bare floor (none of them), ROUNDS rounds in turn, in reverse order every
# other round; then per variant the range of the time to all Ready and of kube-apiserver's CPU
# per User, and each variant's ratio to the bare floor of the same round (docs/performance.md,
# "Where the cost goes"). Each run's whole output is kept in $HOMESTEAD_BENCH_LOGS (default: a
# temporary directory).
#
#   layers.sh [USERS] [ROUNDS]
set -euo pipefail
users=${1:-10000}
rounds=${2:-2}
# shellcheck source=tools/bench/common.sh
source "$(dirname "$0")/common.sh"

# variant name, then HOMESTEAD_BENCH_QUICK and HOMESTEAD_BENCH_FLOOR_WITHOUT
variants=(
  "bounded floor -"
  "no-policies floor policies"
  "no-identity floor identity"
  "no-policies-objects floor policies,objects"
  "bare bare -"
)

for round in $(seq "$rounds"); do
  order=(0 1 2 3 4)
  if ((round % 2 == 0)); then order=(4 3 2 1 0); fi
  for i in "${order[@]}"; do
    read -r name quick without <<<"${variants[$i]}"
    [[ $without == - ]] && without=
    log="$logs/$name-$round.log"
    HOMESTEAD_BENCH_USERS=$users HOMESTEAD_BENCH_QUICK=$quick HOMESTEAD_BENCH_FLOOR_WITHOUT=$without \
      cargo bench -q -p homestead --bench converge >"$log" 2>&1 ||
      { echo "$name, round $round failed: $log"; tail -20 "$log"; exit 1; }
    read -r seconds apiserver _ < <(figures "$log")
    printf 'round %s  %-20s %7.1f s  %6.2f ms of kube-apiserver per User\n' \
      "$round" "$name" "$seconds" "$apiserver"
    echo "$round $name $seconds $apiserver" >>"$logs/figures"
  done
done

echo
echo "$users Users, $rounds rounds (logs: $logs):"
awk '
  { t[$2] = t[$2] " " $3; a[$2] = a[$2] " " $4; s[$1, $2] = $3; if (!($2 in seen)) { seen[$2]; names[++n] = $2 } }
  function range(list,   k, v, i, lo, hi) {
    k = split(list, v, " "); lo = v[1]; hi = v[1]
    for (i = 2; i <= k; i++) { if (v[i] + 0 < lo + 0) lo = v[i]; if (v[i] + 0 > hi + 0) hi = v[i] }
    return lo "-" hi
  }
  END {
    for (j = 1; j <= n; j++) {
      name = names[j]; ratios = ""
      for (r = 1; (r, name) in s; r++) ratios = ratios " " sprintf("%.2f", s[r, name] / s[r, "bare"])
      printf "  %-20s all Ready %-13s kube-apiserver %-11s ms per User; / bare floor: %s x\n", name, range(t[name]) " s", range(a[name]), range(ratios)
    }
  }' "$logs/figures"
