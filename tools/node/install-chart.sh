#!/usr/bin/env bash
# Installs Homestead on a local cluster with a node the way a platform team installs it: the
# image built here (tools/image/build.sh, no registry) loaded into the node's containerd, the
# SCIM service's and the homes API's Secrets, then the Helm chart with two operator replicas,
# the SCIM service, the homes API (registered as an APIService) and Homestead's own
# NetworkPolicies.
# Waits until every Pod is Ready through its probes. Used by `just deploy` and the node tests.
#
#   install-chart.sh <kubeconfig> <containerd-socket> <homestead-binary> <state-dir> [helm args...]
#
# (homestead-operator beside <homestead-binary>: the image holds both.)
#
# Writes into <state-dir> (once; kept across installs): scim-ca.crt, and the SCIM service's
# certificate (for homestead-scim.homestead-system.svc) and bearer token scim-token, which the
# Secrets homestead-scim-tls and homestead-scim-tokens carry; homes-api-ca.crt and the homes
# API's certificate (for homestead-homes-api.homestead-system.svc, in homestead-homes-api-tls).
# Prints the image reference.
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: $0 <kubeconfig> <containerd-socket> <homestead-binary> <state-dir> [helm args...]" >&2; exit 2; }
kubeconfig=$1 socket=$2 binary=$3 state=$4
shift 4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=$("$root/tools/control-plane/build.sh")
helm=$("$root/tools/helm/install.sh")
kubectl() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
namespace=homestead-system
mkdir -p "$state"

# The image, tagged by the binaries' content so a rebuilt binary is a new image to kubelet.
tag=dev-$(cat "$binary" "$(dirname "$binary")/homestead-operator" | sha256sum | cut -c1-12)
"$root/tools/image/build.sh" "$binary" "$state/homestead-image.tar" "$tag" >/dev/null
ctr --address "$socket" --namespace k8s.io images import --base-name homestead.local/homestead \
  "$state/homestead-image.tar" >/dev/null

# The SCIM service's and the homes API's CAs and certificates, and the SCIM token, made once.
if [ ! -f "$state/scim-service.key" ]; then
  name=homestead-scim.$namespace.svc
  "$root/tools/tls/serving-cert.sh" "$state" scim-service "Homestead local SCIM CA" \
    "$name" "$name.cluster.local" "homestead-scim.$namespace"
  openssl rand -hex 32 >"$state/scim-service-token"
  chmod 600 "$state/scim-service-token"
fi
if [ ! -f "$state/homes-api.key" ]; then
  name=homestead-homes-api.$namespace.svc
  "$root/tools/tls/serving-cert.sh" "$state" homes-api "Homestead local homes API CA" \
    "$name" "$name.cluster.local"
fi
kubectl create namespace "$namespace" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n "$namespace" create secret tls homestead-homes-api-tls --cert "$state/homes-api.crt" \
  --key "$state/homes-api.key" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n "$namespace" create secret tls homestead-scim-tls --cert "$state/scim-service.crt" \
  --key "$state/scim-service.key" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n "$namespace" create secret generic homestead-scim-tokens \
  --from-file=tokens="$state/scim-service-token" --dry-run=client -o yaml | kubectl apply -f - >/dev/null

# Homestead's own NetworkPolicies (kube-router enforces them on the node): egress only to the
# API server, by the address and port its EndpointSlice names (policies see traffic after the
# Service's DNAT), and DNS.
api=$(kubectl -n default get endpointslices -l kubernetes.io/service-name=kubernetes \
  -o jsonpath='{.items[0].endpoints[0].addresses[0]} {.items[0].ports[0].port}')
read -r api_address api_port <<<"$api"
"$helm" upgrade --install homestead "$root/charts/homestead" --kubeconfig "$kubeconfig" \
  --namespace "$namespace" --set image.repository=homestead.local/homestead \
  --set image.tag="$tag" --set image.pullPolicy=Never --set scim.enabled=true \
  --set homesApi.enabled=true --set homesApi.caBundle="$(base64 -w0 "$state/homes-api-ca.crt")" \
  --set networkPolicy.enabled=true --set "networkPolicy.apiServerPorts={$api_port}" \
  --set "networkPolicy.apiServerCIDRs={$api_address/32}" \
  --wait --timeout 180s "$@" >&2
echo "homestead.local/homestead:$tag"
