#!/usr/bin/env bash
# Runs the workspace's tests (unit and integration) with up to $HOMESTEAD_TEST_JOBS (default 3)
# test binaries at a time, each with --test-threads=4, instead of cargo test's one binary after
# another. Integration tests wait on real control planes far more than they compute, so binaries
# overlap well even on two cores. Each binary runs from its package's directory with its output
# kept aside and printed whole when it ends; the slowest are started first. Exits non-zero if
# any binary fails, after all have run, listing the failures.
#
#   run.sh [test-name-filter]
set -euo pipefail
jobs=${HOMESTEAD_TEST_JOBS:-3}
filter=${1:-}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# Build every test binary; cargo prints one JSON line per artifact.
cargo test --workspace --lib --bins --tests --no-run --message-format=json-render-diagnostics \
  >"$logs/artifacts.json"
jq -r 'select(.reason == "compiler-artifact" and .profile.test and .executable != null)
       | [(.manifest_path | sub("/Cargo.toml$"; "")), .executable, .target.name] | @tsv' \
  "$logs/artifacts.json" >"$logs/binaries.tsv"
# The slowest binaries first, so the tail of the run is short ones (seconds, measured on the
# local control plane; the rest take under 15).
slow="faults node leader_pause leader_election hr attacks uninstall e2e"
order() {
  while IFS=$'\t' read -r dir exe name; do
    rank=9
    i=0
    for s in $slow; do [ "$s" = "$name" ] && rank=$i; i=$((i + 1)); done
    printf '%s\t%s\t%s\t%s\n' "$rank" "$dir" "$exe" "$name"
  done <"$logs/binaries.tsv" | sort -n | cut -f2-
}

run_one() {
  local dir=$1 exe=$2 name=$3 log
  log="$logs/$(basename "$exe").log"
  local start=$SECONDS
  if (cd "$dir" && "$exe" --test-threads=4 ${filter:+"$filter"}) >"$log" 2>&1; then
    echo "=== $name ($(basename "$exe")): ok in $((SECONDS - start)) s"
    grep -E '^test result' "$log" || true
  else
    echo "=== $name ($(basename "$exe")): FAILED after $((SECONDS - start)) s"
    cat "$log"
    # By executable, hash included: the library and binary targets of a package share a name.
    echo "$name ($(basename "$exe"))" >"$logs/failed-$(basename "$exe")"
  fi
}
export -f run_one
export logs filter

order | tr '\t\n' '\0\0' | xargs -0 -n 3 -P "$jobs" bash -c 'run_one "$@"' _
failed=$(cat "$logs"/failed-* 2>/dev/null || true)
if [ -n "$failed" ]; then
  echo "failed test binaries:"
  echo "$failed"
  exit 1
fi
echo "every test binary passed"
