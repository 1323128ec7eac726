#!/usr/bin/env bash
# Runs the homes API (`homestead homes-api`, docs/homes.md) on this machine for `just up`, as its
# own identity (homes-api.kubeconfig, with manifests/homes-api/rbac.yaml), and registers it with
# kube-apiserver the way the chart does, but pointing at this machine: a Service without a
# selector, its Endpoints and EndpointSlice naming this machine's address (never loopback, which
# the API refuses), and the APIService v1alpha1.homes.homestead.dev with a fresh CA as caBundle.
# Waits until the APIService is Available, so `kubectl --as alice@example.com get homes` works.
#
#   up-local.sh <state-dir> <homestead-binary> [port] [metrics-address]
#
# Writes into <state-dir>: homes-api-ca.crt, homes-api.crt/.key, homes-api.log, homes-api.pid.
# The address: the node's bridge (homestead0) if it is up, else this machine's first address.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 <state-dir> <homestead-binary> [port] [metrics-address]" >&2; exit 2; }
state=$1 binary=$2 port=${3:-18444} metrics=${4:-127.0.0.1:18081}
kubectl() { "$state/bin/kubectl" --kubeconfig "$state/admin.kubeconfig" "$@"; }
namespace=homestead-system
service=homestead-homes-api

address=$(ip -4 -o addr show homestead0 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}' || true)
[ -n "$address" ] || address=$(hostname -I | awk '{print $1}')
[ -n "$address" ] || { echo "no address but loopback: the API server cannot reach the homes API" >&2; exit 1; }

"$(dirname "$0")/../tls/serving-cert.sh" "$state" homes-api "Homestead local homes API CA" \
  "$service.$namespace.svc"

kubectl apply -f "$(dirname "$0")/../../manifests/homes-api/rbac.yaml" >/dev/null
KUBECONFIG=$state/homes-api.kubeconfig RUST_LOG=${RUST_LOG:-info} nohup "$binary" --log-format text \
  homes-api --address "$address:$port" --metrics-address "$metrics" \
  --tls-cert "$state/homes-api.crt" --tls-key "$state/homes-api.key" >"$state/homes-api.log" 2>&1 &
echo $! >"$state/homes-api.pid"
for _ in $(seq 60); do curl -fs "http://$metrics/readyz" >/dev/null 2>&1 && break; sleep 0.5; done
curl -fs "http://$metrics/readyz" >/dev/null || { echo "the homes API did not start:" >&2; tail -20 "$state/homes-api.log" >&2; exit 1; }

kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Service
metadata: {name: $service, namespace: $namespace}
spec:
  ports: [{name: https, port: 443, targetPort: $port}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: $service-local
  namespace: $namespace
  labels: {kubernetes.io/service-name: $service, endpointslice.kubernetes.io/managed-by: homestead-just-up}
addressType: IPv4
endpoints: [{addresses: ["$address"], conditions: {ready: true}}]
ports: [{name: https, port: $port, protocol: TCP}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1alpha1.homes.homestead.dev}
spec:
  group: homes.homestead.dev
  version: v1alpha1
  service: {name: $service, namespace: $namespace, port: 443}
  caBundle: $(base64 -w0 "$state/homes-api-ca.crt")
  groupPriorityMinimum: 1000
  versionPriority: 15
YAML
# kube-apiserver of this version may still resolve a Service through its Endpoints.
kubectl apply -f - 2>/dev/null >/dev/null <<YAML || true
apiVersion: v1
kind: Endpoints
metadata: {name: $service, namespace: $namespace}
subsets: [{addresses: [{ip: "$address"}], ports: [{name: https, port: $port}]}]
YAML
kubectl wait --for condition=Available --timeout=60s apiservice/v1alpha1.homes.homestead.dev >/dev/null ||
  { kubectl get apiservice v1alpha1.homes.homestead.dev -o yaml >&2; tail -20 "$state/homes-api.log" >&2; exit 1; }
echo "homes API on $address:$port (metrics http://$metrics/metrics), registered as v1alpha1.homes.homestead.dev"
