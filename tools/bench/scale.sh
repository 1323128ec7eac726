#!/usr/bin/env bash
# Everything at once, at scale (docs/performance.md, "At scale"): ROUNDS rounds of USERS Users,
# USERS Shares, USERS/10 team workspaces of 10 members and 200 directory groups choosing Profiles.
# Each round runs floor A, Homestead and floor B, each on a fresh control plane
# (`HOMESTEAD_BENCH_QUICK=scale-floor|scale-homestead`, crates/operator/benches/converge/scale.rs);
# Homestead's side then restarts the operator and loads the homes API. Prints one table of every
# target and every round, and exits 1 when any round misses any target. A benchmark, not a test:
# the figures are this machine's. Each run's whole output is kept in $HOMESTEAD_BENCH_LOGS
# (default: a temporary directory).
#
#   scale.sh [USERS] [ROUNDS]
set -euo pipefail
users=${1:-10000}
rounds=${2:-3}
# shellcheck source=tools/bench/common.sh
source "$(dirname "$0")/common.sh"

: >"$logs/figures"
for round in $(seq "$rounds"); do
  for side in floor-a homestead floor-b; do
    log="$logs/$side-$round.log"
    mode=scale-${side%-?}
    HOMESTEAD_BENCH_USERS=$users HOMESTEAD_BENCH_QUICK=$mode \
      cargo bench -q -p homestead --bench converge >"$log" 2>&1 ||
      { echo "$side, round $round failed: $log"; tail -20 "$log"; exit 1; }
    # `scale: <key> <value>` lines, as `<round> <side> <key> <value>`.
    sed -n "s/^scale: /$round $side /p" "$log" >>"$logs/figures"
    echo "round $round: $side done"
  done
done

echo
echo "$users Users, $users Shares, $((users / 10)) team workspaces, 200 groups choosing Profiles; $rounds rounds (logs: $logs)"
awk -v rounds="$rounds" '
  { v[$1, $2, $3] = $4 }
  function floors(r, key) { return (v[r, "floor-a", key] + v[r, "floor-b", key]) / 2 }
  # One row: its name, the target as a word and a bound, then each round; a miss is marked "!".
  function row(name, target, op, bound, key, ratio, format,   r, x, cell, line) {
    line = sprintf("| %-58s | %-9s |", name, target)
    for (r = 1; r <= rounds; r++) {
      x = ratio ? v[r, "homestead", key] / floors(r, key) : v[r, "homestead", key]
      cell = sprintf(format, x)
      if (!((r, "homestead", key) in v) || (ratio && !((r, "floor-a", key) in v))) { cell = "missing"; x = bound + 1; op = op ? op : "<=" }
      if ((op == "<=" && x > bound + 1e-9) || (op == "==" && x != bound)) { cell = cell " !"; missed++ }
      line = line sprintf(" %-9s |", cell)
    }
    print line
  }
  END {
    head = sprintf("| %-58s | %-9s |", "measure", "target"); rule = "|" sprintf("%60s", "") "|" sprintf("%11s", "") "|"
    gsub(/ /, "-", rule)
    for (r = 1; r <= rounds; r++) { head = head sprintf(" round %-3s |", r); rule = rule "-----------|" }
    print head; print rule
    row("operator peak RSS (MiB)", "<= 48", "<=", 48, "operator-peak-mib", 0, "%.1f")
    row("operator peak RSS during the restart (MiB)", "<= 48", "<=", 48, "restart-peak-mib", 0, "%.1f")
    row("operator RSS steady after a restart (MiB)", "<= 40", "<=", 40, "restart-steady-mib", 0, "%.1f")
    row("homes API peak RSS under 50 people (MiB)", "<= 48", "<=", 48, "homes-api-peak-mib", 0, "%.1f")
    row("restart: operator writes", "0", "==", 0, "restart-writes", 0, "%d")
    row("restart: RoleBindings created or deleted", "0", "==", 0, "restart-rolebindings-changed", 0, "%d")
    row("restart: status writes", "0", "==", 0, "restart-status-writes", 0, "%d")
    row("restart: time to the first reconcile (s)", "-", "", 0, "restart-first-reconcile-seconds", 0, "%.1f")
    row("provisioning Users / the floors (A, B) mean", "<= 1.10x", "<=", 1.10, "users", 1, "%.2fx")
    row("Shares / the floors (A, B) mean", "<= 1.10x", "<=", 1.10, "shares", 1, "%.2fx")
    row("team workspaces / the floors (A, B) mean", "-", "", 0, "workspaces", 1, "%.2fx")
    row("kubectl get homes p99 / get namespace p99, 50 at once", "<= 1.5x", "<=", 1.5, "homes-p99-ratio", 0, "%.2fx")
    row("1,000-member group change to every binding (s)", "<= 10", "<=", 10, "group-seconds", 0, "%.1f")
    row("  its RoleBinding writes per binding", "1", "==", 1, "group-binding-writes-per-binding", 0, "%.2f")
    if (missed) { printf "%d targets missed\n", missed; exit 1 }
    print "every target held in every round"
  }' "$logs/figures"
