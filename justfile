# Homestead's tasks. `just` lists them.

set shell := ["bash", "-euo", "pipefail", "-c"]

# Where `just up` keeps kubeconfigs, pid files and logs (git-ignored).
state := ".homestead"
# Address of the operator's /metrics, /healthz and /readyz under `just up`.
metrics_address := env_var_or_default("HOMESTEAD_METRICS_ADDRESS", "127.0.0.1:8080")
# Address of the SCIM service under `just up` (HTTPS; CA in .homestead/scim-ca.crt).
scim_address := env_var_or_default("HOMESTEAD_SCIM_ADDRESS", "127.0.0.1:8443")
kubectl := state / "bin/kubectl --kubeconfig " + state / "admin.kubeconfig"
# Cargo's build directory (CI keeps it in the cache, see .ci/run).
target := env_var_or_default("CARGO_TARGET_DIR", "target")
# The operator's version (the image's tag, the chart's appVersion).
version := `sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1`

default:
    @just --list

# Build the local cluster's binaries from Go modules (cached): etcd, kube-apiserver, kube-controller-manager, kubectl, and the node's kube-scheduler, kubelet and kube-proxy (a node's first start builds kube-router and its images: tools/node/build.sh).
control-plane:
    @tools/control-plane/build.sh >/dev/null

# Build Homestead's image with no registry (the release binaries `homestead` and `homestead-operator`, its shared libraries, uid 65532) into <target>/image/homestead.tar, and load it into the node of `just up` when one runs.
image:
    #!/usr/bin/env bash
    set -euo pipefail
    cargo build --release --locked -p homestead --bins
    tools/image/build.sh {{target}}/release/homestead {{target}}/image/homestead.tar {{version}} >/dev/null
    echo "built {{target}}/image/homestead.tar (homestead.local/homestead:{{version}})"
    if [ -f {{state}}/node.dir ]; then
      ctr --address "$(cat {{state}}/node.dir)/containerd.sock" --namespace k8s.io images import \
        --base-name homestead.local/homestead {{target}}/image/homestead.tar >/dev/null
      echo "loaded into the node of just up as homestead.local/homestead:{{version}}"
    fi

# Package the CLI as kubectl's homestead plugin for krew (linux/amd64): dist/kubectl-homestead_linux_amd64.tar.gz and dist/homestead.yaml (plugins/homestead.yaml with the archive's sha256 and its address under url, where you will publish it); `kubectl krew install --manifest=dist/homestead.yaml --archive=dist/kubectl-homestead_linux_amd64.tar.gz` installs it from here.
krew url:
    cargo build --release --locked -p homestead --bin homestead
    tools/krew/package.sh {{target}}/release/homestead dist {{url}}

# Build every crate.
build:
    cargo build --workspace --all-targets

# Regenerate manifests/crd.yaml (and the chart's copy) from the Rust types, the chart's README from its values, and the plain install (rbac/, manifests/) from the chart.
generate:
    cargo run -q -p homestead-api --bin crdgen > manifests/crd.yaml
    cp manifests/crd.yaml charts/homestead/files/crds.yaml
    tools/helm/docs.sh
    tools/helm/plain.sh

# Print every crate's module graph (a module is a file) and its import cycles, and check the reconciler's layers (crates/reconciler/tests/layers.rs; docs/development.md, "Layers").
modules:
    cargo test -q -p homestead-reconciler --test layers -- --nocapture --test-threads 1

# Format the code.
fmt:
    cargo fmt --all

# Check formatting and lints (warnings are errors).
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings

# Run every test: unit tests, and integration tests on the real local cluster (three test binaries at a time: HOMESTEAD_TEST_JOBS).
test: control-plane
    tools/test/run.sh
    just _no-leftovers
    just _no-node-leftovers

# The access, attack and e2e tests on the oldest supported Kubernetes (1.30, tools/control-plane/1.30, built from its Go modules into the cache like the current one); `just test` runs every test on the pinned current one (docs/development.md, "Supported versions").
test-matrix: control-plane
    tools/test/matrix.sh

# Homestead against a floor client on one local control plane (release build): time to all Ready and to offboard, requests per User, memory steady and during a re-list, writes in steady state. Options HOMESTEAD_BENCH_QUICK, HOMESTEAD_BENCH_FLOOR_EVENT and HOMESTEAD_BENCH_PPROF: see docs/performance.md.
bench users="1000": control-plane
    HOMESTEAD_BENCH_USERS={{users}} cargo bench -p homestead --bench converge

# Each side's provisioning alone on a fresh control plane (bounded floor, Homestead, bare floor; every other round in reverse order), ROUNDS rounds, then the ranges, each round's ratios and their medians (release build; about 5 minutes a round at 10,000 Users).
bench-rounds users="10000" rounds="3": control-plane
    tools/bench/rounds.sh {{users}} {{rounds}}

# Shares at scale: USERS Users each sharing their home with the next (as many Shares), Homestead against the bounded floor of the same writes before and after it, the operator's peak RSS, writes in steady state, and one member of a 1,000-member group named by 100 Shares replaced; ROUNDS rounds, each on a fresh control plane (release build; docs/performance.md, "Shares").
bench-shares users="10000" rounds="3": control-plane
    tools/bench/share-rounds.sh {{users}} {{rounds}}

# The homes API under load (release build): USERS Users sharing their homes, then 50 people at once asking kube-apiserver for their homes and for their own namespace, p50 and p99 of each side by side, and the homes API's memory (docs/homes.md, "Load").
bench-homes users="10000": control-plane
    HOMESTEAD_BENCH_USERS={{users}} HOMESTEAD_BENCH_QUICK=1 HOMESTEAD_BENCH_HOMES=1 cargo bench -q -p homestead --bench shares

# Everything at once at scale (docs/performance.md, "At scale"): USERS Users, as many Shares, USERS/10 team workspaces and 200 directory groups choosing Profiles; each round floor A, Homestead, floor B on fresh control planes, then a restart and the homes API under load; one table of every target, exit 1 when a round misses one (release build; about 20 minutes a round at 10,000 Users).
bench-scale users="10000" rounds="3": control-plane
    tools/bench/scale.sh {{users}} {{rounds}}

# What each safety layer (admission policies, the operator's identity, Homestead's objects) costs the bounded floor: with and without each on a fresh control plane, and the bare floor, ROUNDS rounds (release build; about 12 minutes a round at 10,000 Users).
bench-layers users="10000" rounds="2": control-plane
    tools/bench/layers.sh {{users}} {{rounds}}

# Kill the operator (SIGKILL) at random moments during a bulk import and an offboarding, then check nothing was lost or leaked, and count writes after a restart (release build; minutes).
chaos users="1000" offboard="300": control-plane
    HOMESTEAD_CHAOS_USERS={{users}} HOMESTEAD_CHAOS_OFFBOARD={{offboard}} cargo bench -p homestead --bench chaos

# An adversarial soak for SECONDS (default 600) from SEED (default random): a seeded random workload of HR, SCIM, tenants, the platform and faults against two operator replicas and the SCIM service, an oracle checking every promise every second, and a quiescent point every 90 s (the tests' build: debug assertions on, nothing more to compile after `just test`). Violations are written to <target>/soak/ as reproductions; the last line is the summary. See docs/soak.md.
soak seconds="600" seed="": control-plane
    HOMESTEAD_SOAK_SECONDS={{seconds}} HOMESTEAD_SOAK_SEED={{seed}} cargo bench --profile dev -p homestead --bench soak

# Replay a soak's reproduction FILE (written by `just soak`): its operations up to its last quiescent point at once, then the rest at their recorded pace, under the same oracle.
soak-replay file: control-plane
    HOMESTEAD_SOAK_REPLAY="$(realpath {{file}})" cargo bench --profile dev -p homestead --bench soak

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

# Fail if a node started by the tests left a trace (its bridge or a container), unless `just up` runs one.
_no-node-leftovers:
    #!/usr/bin/env bash
    set -euo pipefail
    [ -f {{state}}/node.dir ] && { echo "just up runs a node; not checked"; exit 0; }
    for _ in $(seq 40); do
      procs=$(find /sys/fs/cgroup/pids/kubepods -name cgroup.procs -exec cat {} + 2>/dev/null || true)
      if [ -z "$procs" ] && ! ip link show homestead0 >/dev/null 2>&1; then echo "no node trace left behind"; exit 0; fi
      sleep 0.5
    done
    echo "the tests' node left a trace: bridge $(ip -br link show homestead0 2>&1), container processes: ${procs:-none}"; exit 1

# Start the local cluster in the background (testenv flags: --node, --require-node), writing kubeconfigs and more into .homestead/.
_cluster *flags:
    #!/usr/bin/env bash
    set -euo pipefail
    mkdir -p {{state}}
    if [ -f {{state}}/testenv.pid ] && kill -0 "$(cat {{state}}/testenv.pid)" 2>/dev/null; then
      echo "already up; run 'just down' first"; exit 1
    fi
    # Every build happens here, in the foreground with its progress, before anything starts: the
    # binaries, and with --node the node's tools (Debian packages, kube-router, images; minutes
    # on a machine that never ran Homestead). The cluster's own start then builds nothing.
    cargo build -p homestead-testenv -p homestead --bins
    if [[ " {{flags}} " == *" --node "* ]]; then
      echo "preparing the node's tools (cached in ${HOMESTEAD_CACHE:-~/.cache/homestead}/node)"
      if ! tools/node/build.sh >/dev/null && [[ " {{flags}} " == *" --require-node "* ]]; then
        echo "the node's tools could not be prepared (above); the node is required"; exit 1
      fi
    fi
    nohup {{target}}/debug/homestead-testenv up --state-dir {{state}} {{flags}} > {{state}}/testenv.log 2>&1 &
    pid=$!
    # Wait on the process, not a count: until it says ready, or until it exits (its cause is the
    # end of its log). Its own steps have their own timeouts (docs/development.md, "just up").
    echo "starting the local cluster (log: {{state}}/testenv.log)"
    while [ ! -f {{state}}/ready ] && kill -0 "$pid" 2>/dev/null; do sleep 0.5; done
    [ -f {{state}}/ready ] || { echo "the local cluster did not start (homestead-testenv exited):"; tail -50 {{state}}/testenv.log; exit 1; }
    if [ -f {{state}}/node.error ]; then echo "no node, so no Pods run: $(cat {{state}}/node.error)"; fi

# Start the local cluster (control plane, and a node unless this machine cannot run one: it says why), install the CRD, rbac/ (admission policy included) and the operator (as its own identity, allowing namespaces user-*, research-* and legacy-*), the SCIM service and the homes API (registered as an APIService), and apply manifests/samples/.
up: control-plane
    #!/usr/bin/env bash
    set -euo pipefail
    just _cluster --node
    {{kubectl}} apply -f manifests/namespace.yaml
    {{kubectl}} apply --server-side -f manifests/crd.yaml
    {{kubectl}} wait --for condition=Established --timeout=60s crd/users.homestead.dev crd/profiles.homestead.dev crd/directorygroups.homestead.dev crd/shares.homestead.dev crd/workspaces.homestead.dev
    # rbac/, the admission policy's namespace names in step with the operator's
    # --allowed-namespace below (a JSON patch of the policy's first variable, docs/security.md).
    {{kubectl}} apply -k rbac/
    cat > {{state}}/namespace-pattern.json <<'EOF'
    [{"op": "test", "path": "/spec/variables/0/name", "value": "namespacePattern"},
     {"op": "replace", "path": "/spec/variables/0/expression",
      "value": "r'^(user-.*|research-.*|legacy-.*|ws-.*)$'"}]
    EOF
    {{kubectl}} patch validatingadmissionpolicy homestead-operator-bounds --type json \
      --patch-file {{state}}/namespace-pattern.json
    KUBECONFIG={{state}}/operator.kubeconfig POD_NAMESPACE=homestead-system POD_NAME=homestead-local \
      RUST_LOG=${RUST_LOG:-info} nohup {{target}}/debug/homestead-operator --log-format text --metrics-address {{metrics_address}} \
      --allowed-namespace 'user-*,research-*,legacy-*' > {{state}}/operator.log 2>&1 &
    echo $! > {{state}}/operator.pid
    for _ in $(seq 60); do curl -fs http://{{metrics_address}}/readyz >/dev/null 2>&1 && break; sleep 0.5; done
    # The SCIM service, as its own identity, with a fresh CA, certificate and bearer token.
    {{kubectl}} apply -f manifests/scim/rbac.yaml
    KUBECONFIG={{state}}/scim.kubeconfig RUST_LOG=${RUST_LOG:-info} nohup {{target}}/debug/homestead --log-format text scim \
      --address {{scim_address}} --token-file {{state}}/scim-token \
      --tls-cert {{state}}/scim-tls.crt --tls-key {{state}}/scim-tls.key > {{state}}/scim.log 2>&1 &
    echo $! > {{state}}/scim.pid
    for _ in $(seq 60); do curl -fs --cacert {{state}}/scim-ca.crt https://{{scim_address}}/readyz >/dev/null 2>&1 && break; sleep 0.5; done
    # The homes API (kubectl get homes), as its own identity, registered as an APIService.
    tools/homes-api/up-local.sh {{state}} {{target}}/debug/homestead
    {{kubectl}} apply -f manifests/samples/
    # Homestead's image (the debug binaries, without debug information) on the node, for
    # `just doctor`'s probe Pods.
    if [ -f {{state}}/node.dir ]; then
      tag=dev-$(cat {{target}}/debug/homestead {{target}}/debug/homestead-operator | sha256sum | cut -c1-12)
      tools/image/build.sh {{target}}/debug/homestead {{state}}/homestead-image.tar "$tag" >/dev/null
      ctr --address "$(cat {{state}}/node.dir)/containerd.sock" --namespace k8s.io images import \
        --base-name homestead.local/homestead {{state}}/homestead-image.tar >/dev/null
      echo "homestead.local/homestead:$tag" > {{state}}/homestead-image.ref
    fi
    # Wait until every sample User has a Ready condition (True or False, as the README's tour expects).
    for _ in $(seq 120); do
      missing=$({{kubectl}} get users -o jsonpath='{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '=$' || true)
      [ "$missing" = 0 ] && break; sleep 0.5
    done
    {{kubectl}} get users
    echo
    echo "Homestead is up. Try:"
    echo "  export PATH=\$PWD/{{state}}/bin:\$PATH KUBECONFIG=\$PWD/{{state}}/admin.kubeconfig"
    echo "  kubectl get users; kubectl get namespaces; kubectl describe user alice"
    echo "  kubectl --as alice@example.com get homes    # where alice may work (the homes API)"
    echo "  curl http://{{metrics_address}}/metrics"
    echo "SCIM 2.0 for identity providers: https://{{scim_address}}/scim/v2 (bearer token in {{state}}/scim-token, CA in {{state}}/scim-ca.crt):"
    echo "  curl --cacert {{state}}/scim-ca.crt -H \"Authorization: Bearer \$(cat {{state}}/scim-token)\" https://{{scim_address}}/scim/v2/Users"
    echo "  just scim-check    # the scim2-tester compliance checker against it"
    echo "  just doctor        # the go-live checks, as alice signs in, isolation tried with real traffic"
    if [ -f {{state}}/toolbox.ref ]; then
      echo "Run a pod as alice (the node's toolbox image: busybox and kubectl):"
      echo "  kubectl --as alice@example.com -n user-alice run hello --image=$(cat {{state}}/toolbox.ref) --image-pull-policy=Never \\"
      echo "    --restart=Never --override-type=strategic \\"
      echo "    --overrides='{\"spec\":{\"containers\":[{\"name\":\"hello\",\"resources\":{\"requests\":{\"cpu\":\"50m\",\"memory\":\"32Mi\"}}}]}}' \\"
      echo "    --command -- sh -c 'id; sleep 3600'"
      echo "  (alice's quota wants requests; 'kubectl --as alice@example.com -n user-bob run ...' is forbidden)"
    fi
    echo "Logs: {{state}}/operator.log, {{state}}/scim.log, {{state}}/testenv.log. Stop with: just down"

# Start the local cluster with its node (needs root) and install Homestead from the Helm chart, as a platform team does: the image built here (release build), two operator replicas and the SCIM service, Ready through their probes. Stop with `just down`.
up-chart: control-plane
    #!/usr/bin/env bash
    set -euo pipefail
    just _cluster --node --require-node
    cargo build -q --release --locked -p homestead --bins
    image=$(tools/node/install-chart.sh {{state}}/admin.kubeconfig "$(cat {{state}}/node.dir)/containerd.sock" \
      {{target}}/release/homestead {{state}}/chart)
    {{kubectl}} get pods -A -o wide
    echo
    echo "Homestead ($image) runs from its Helm chart. Try:"
    echo "  export PATH=\$PWD/{{state}}/bin:\$PATH KUBECONFIG=\$PWD/{{state}}/admin.kubeconfig"
    echo "  kubectl apply -f manifests/samples/ && kubectl get users"
    echo "SCIM through its Service: CA {{state}}/chart/scim-service-ca.crt, token {{state}}/chart/scim-service-token,"
    echo "  https://homestead-scim.homestead-system.svc:8443/scim/v2 at ClusterIP \$(kubectl -n homestead-system get svc homestead-scim -o jsonpath='{.spec.clusterIP}')"

# Package the Helm chart as a release artifact: target/chart/homestead-<version>.tgz.
package:
    "$(tools/helm/install.sh)" package charts/homestead --destination target/chart

# Scan what the Helm chart renders with checkov and kube-score (pinned, installed once); fails on any finding tools/scan/run.sh does not name as a decision.
scan:
    tools/scan/run.sh

# Run the SCIM compliance checker scim2-tester (PyPI, installed into a cached virtualenv) against the SCIM service of `just up`.
scim-check:
    tools/scim/check.sh https://{{scim_address}}/scim/v2 {{state}}/scim-token {{state}}/scim-ca.crt

# Run `homestead doctor` against `just up`'s cluster: as the admin, with alice's own kubeconfig for the identity mapping, and (with the node) Homestead's image for the network isolation probe Pods.
doctor:
    #!/usr/bin/env bash
    set -euo pipefail
    image=()
    [ -f {{state}}/homestead-image.ref ] && image=(--probe-image "$(cat {{state}}/homestead-image.ref)")
    {{target}}/debug/homestead doctor --kubeconfig {{state}}/admin.kubeconfig \
      --person-kubeconfig {{state}}/alice.kubeconfig "${image[@]}"

# Stop the SCIM service, the operator and the control plane started by `just up`.
down:
    #!/usr/bin/env bash
    set -euo pipefail
    for name in homes-api scim operator testenv; do
      pidfile={{state}}/$name.pid
      [ -f "$pidfile" ] || continue
      pid=$(cat "$pidfile")
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -0 "$pid" 2>/dev/null && { echo "$name ($pid) did not stop"; exit 1; }
      rm -f "$pidfile"
    done
    rm -f {{state}}/testenv.dir {{state}}/homestead-image.ref {{state}}/homestead-image.tar
    echo "stopped"
