# Homestead's tasks. `just` lists them.

set shell := ["bash", "-euo", "pipefail", "-c"]

# Where `just up` keeps kubeconfigs, pid files and logs (git-ignored).
state := ".homestead"
# Address of the operator's /metrics, /healthz and /readyz under `just up`.
metrics_address := env_var_or_default("HOMESTEAD_METRICS_ADDRESS", "127.0.0.1:8080")
# Address of the SCIM service under `just up` (HTTPS; CA in .homestead/scim-ca.crt).
scim_address := env_var_or_default("HOMESTEAD_SCIM_ADDRESS", "127.0.0.1:8443")
kubectl := state / "bin/kubectl --kubeconfig " + state / "admin.kubeconfig"

default:
    @just --list

# Build etcd, kube-apiserver, kube-controller-manager and kubectl from Go modules (cached).
control-plane:
    @tools/control-plane/build.sh >/dev/null

# Build every crate.
build:
    cargo build --workspace --all-targets

# Regenerate manifests/crd.yaml (and the chart's copy) from the Rust types.
generate:
    cargo run -q -p homestead-api --bin crdgen > manifests/crd.yaml
    cp manifests/crd.yaml charts/homestead/crds/crd.yaml

# Format the code.
fmt:
    cargo fmt --all

# Check formatting and lints (warnings are errors).
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings

# Run every test: unit tests, and integration tests on the real local control plane.
test: control-plane
    cargo test --workspace --lib --bins --tests -- --test-threads=4
    just _no-leftovers

# Homestead against a floor client on one local control plane (release build): time to all Ready and to offboard, requests per User, memory steady and during a re-list, writes in steady state. Options HOMESTEAD_BENCH_QUICK, HOMESTEAD_BENCH_FLOOR_EVENT and HOMESTEAD_BENCH_PPROF: see the README, Performance.
bench users="1000": control-plane
    HOMESTEAD_BENCH_USERS={{users}} cargo bench -p homestead --bench converge

# Kill the operator (SIGKILL) at random moments during a bulk import and an offboarding, then check nothing was lost or leaked, and count writes after a restart (release build; minutes).
chaos users="1000" offboard="300": control-plane
    HOMESTEAD_CHAOS_USERS={{users}} HOMESTEAD_CHAOS_OFFBOARD={{offboard}} cargo bench -p homestead --bench chaos

# Fail if a control-plane process started by the tests outlived them (a running `just up` is fine).
_no-leftovers:
    #!/usr/bin/env bash
    set -euo pipefail
    keep=$(cat {{state}}/testenv.dir 2>/dev/null || echo '^$')
    for _ in $(seq 40); do
      left=$(pgrep -af 'homestead-testenv-[0-9a-f]+' | grep -v -e "$keep" -e pgrep || true)
      [ -z "$left" ] && { echo "no control-plane process left behind"; exit 0; }
      sleep 0.5
    done
    echo "control-plane processes left behind by the tests:"; echo "$left"; exit 1

# Start the local control plane, install the CRD, rbac/ (admission policy included) and the operator (as its own identity, allowing namespaces user-*, research-* and legacy-*), and apply manifests/samples/.
up: control-plane
    #!/usr/bin/env bash
    set -euo pipefail
    mkdir -p {{state}}
    if [ -f {{state}}/testenv.pid ] && kill -0 "$(cat {{state}}/testenv.pid)" 2>/dev/null; then
      echo "already up; run 'just down' first"; exit 1
    fi
    cargo build -q -p homestead-testenv -p homestead --bins
    nohup target/debug/homestead-testenv up --state-dir {{state}} > {{state}}/testenv.log 2>&1 &
    for _ in $(seq 240); do [ -f {{state}}/ready ] && break; kill -0 $! 2>/dev/null || break; sleep 0.5; done
    [ -f {{state}}/ready ] || { echo "control plane did not start:"; tail -50 {{state}}/testenv.log; exit 1; }
    {{kubectl}} apply -f manifests/namespace.yaml -f manifests/crd.yaml
    {{kubectl}} wait --for condition=Established --timeout=60s crd/users.homestead.dev crd/profiles.homestead.dev
    {{kubectl}} apply -k rbac/
    # The admission policy's namespace names, in step with the operator's --allowed-namespace below.
    {{kubectl}} -n homestead-system patch configmap homestead-operator-bounds --type merge \
      -p '{"data":{"namespacePattern":"^(user-.*|research-.*|legacy-.*)$"}}'
    KUBECONFIG={{state}}/operator.kubeconfig POD_NAMESPACE=homestead-system POD_NAME=homestead-local \
      RUST_LOG=${RUST_LOG:-info} nohup target/debug/homestead --log-format text --metrics-address {{metrics_address}} \
      --allowed-namespace 'user-*,research-*,legacy-*' > {{state}}/operator.log 2>&1 &
    echo $! > {{state}}/operator.pid
    for _ in $(seq 60); do curl -fs http://{{metrics_address}}/readyz >/dev/null 2>&1 && break; sleep 0.5; done
    # The SCIM service, as its own identity, with a fresh CA, certificate and bearer token.
    {{kubectl}} apply -f manifests/scim/service-account.yaml -f manifests/scim/rbac.yaml
    KUBECONFIG={{state}}/scim.kubeconfig RUST_LOG=${RUST_LOG:-info} nohup target/debug/homestead --log-format text scim \
      --address {{scim_address}} --token-file {{state}}/scim-token \
      --tls-cert {{state}}/scim-tls.crt --tls-key {{state}}/scim-tls.key > {{state}}/scim.log 2>&1 &
    echo $! > {{state}}/scim.pid
    for _ in $(seq 60); do curl -fs --cacert {{state}}/scim-ca.crt https://{{scim_address}}/readyz >/dev/null 2>&1 && break; sleep 0.5; done
    {{kubectl}} apply -f manifests/samples/
    # Wait until every sample User has a Ready condition (True or False, as README.md expects).
    for _ in $(seq 120); do
      missing=$({{kubectl}} get users -o jsonpath='{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '=$' || true)
      [ "$missing" = 0 ] && break; sleep 0.5
    done
    {{kubectl}} get users
    echo
    echo "Homestead is up. Try:"
    echo "  export PATH=\$PWD/{{state}}/bin:\$PATH KUBECONFIG=\$PWD/{{state}}/admin.kubeconfig"
    echo "  kubectl get users; kubectl get namespaces; kubectl describe user alice"
    echo "  curl http://{{metrics_address}}/metrics"
    echo "SCIM 2.0 for identity providers: https://{{scim_address}}/scim/v2 (bearer token in {{state}}/scim-token, CA in {{state}}/scim-ca.crt):"
    echo "  curl --cacert {{state}}/scim-ca.crt -H \"Authorization: Bearer \$(cat {{state}}/scim-token)\" https://{{scim_address}}/scim/v2/Users"
    echo "  just scim-check    # the scim2-tester compliance checker against it"
    echo "Logs: {{state}}/operator.log, {{state}}/scim.log, {{state}}/testenv.log. Stop with: just down"

# Run the SCIM compliance checker scim2-tester (PyPI, installed into a cached virtualenv) against the SCIM service of `just up`.
scim-check:
    tools/scim/check.sh https://{{scim_address}}/scim/v2 {{state}}/scim-token {{state}}/scim-ca.crt

# Stop the SCIM service, the operator and the control plane started by `just up`.
down:
    #!/usr/bin/env bash
    set -euo pipefail
    for name in scim operator testenv; do
      pidfile={{state}}/$name.pid
      [ -f "$pidfile" ] || continue
      pid=$(cat "$pidfile")
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -0 "$pid" 2>/dev/null && { echo "$name ($pid) did not stop"; exit 1; }
      rm -f "$pidfile"
    done
    rm -f {{state}}/testenv.dir
    echo "stopped"
