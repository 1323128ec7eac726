#!/usr/bin/env bash
# Scans what the Helm chart renders, every optional part on (the SCIM service, the homes API,
# NetworkPolicies, monitoring, the pre-delete hook of crds.keep=false): kubeconform against the JSON schemas of the Kubernetes the project pins (made
# from that module's own OpenAPI spec by openapi2jsonschema, cached; CRDs, ServiceMonitors and
# PrometheusRules are not in it, and the chart tests dry-run them against a real API server),
# then checkov and kube-score (tools/scan/install.sh). Fails on any finding but the ones below,
# each a decision written down here:
#   CPU limit (CKV_K8S_11, kube-score container-resources' CPU limit): none, on purpose; a CPU
#     limit throttles a reconcile burst or a SCIM sync while the node has CPU to spare. Memory
#     is limited.
#   imagePullPolicy Always (CKV_K8S_15, container-image-pull-policy): IfNotPresent; pin an
#     immutable tag or image.digest instead.
#   image digest (CKV_K8S_43): image.digest pins one; the default names the chart's appVersion.
#   the default namespace (CKV_K8S_21): nothing of Homestead's is there (Events about
#     cluster-scoped Users are, under the ClusterRole's create/patch of Events).
#   ServiceAccount token mounted (CKV_K8S_38): the operator and the SCIM service are API clients.
#   host podAntiAffinity (deployment-has-host-podantiaffinity): topologySpreadConstraints over
#     hosts and zones do it, without making a second replica unschedulable on one node.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$("$root/tools/scan/install.sh")
helm=$("$root/tools/helm/install.sh")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$helm" template homestead "$root/charts/homestead" --namespace homestead-system \
  --set scim.enabled=true --set networkPolicy.enabled=true --set "networkPolicy.apiServerCIDRs={10.0.0.1/32}" \
  --set monitoring.serviceMonitor.enabled=true --set monitoring.prometheusRule.enabled=true \
  --set monitoring.dashboard.enabled=true --set homesApi.enabled=true \
  --set homesApi.caBundle=Y2E= --set crds.keep=false >"$out/chart.yaml"
# The pinned Kubernetes version and its OpenAPI spec, from the control plane's own go.mod.
kubernetes=$(cd "$root/tools/control-plane" && GOFLAGS=-mod=mod go mod download -json k8s.io/kubernetes)
version=$(sed -n 's/^[[:space:]]*"Version": "\(.*\)",$/\1/p' <<<"$kubernetes")
module=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$kubernetes")
schemas=${HOMESTEAD_CACHE:-$HOME/.cache/homestead}/tools/kubernetes-json-schema
if [ ! -f "$schemas/$version-standalone-strict/deployment-apps-v1.json" ]; then
  echo "making the JSON schemas of Kubernetes $version (once)" >&2
  mkdir -p "$schemas"
  # openapi2jsonschema resolves its references against a relative output path only.
  (cd "$schemas" && rm -rf "$version-standalone-strict" &&
    "$bin/openapi2jsonschema" --kubernetes --expanded --stand-alone --strict \
      -o "$version-standalone-strict" "file://$module/api/openapi-spec/swagger.json" >/dev/null 2>&1 ||
    [ -f "$version-standalone-strict/deployment-apps-v1.json" ])
fi
echo "kubeconform (Kubernetes $version):"
"$bin/kubeconform" -strict -summary -kubernetes-version "${version#v}" \
  -schema-location "$schemas/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
  -skip CustomResourceDefinition,ServiceMonitor,PrometheusRule "$out/chart.yaml"
echo "checkov:"
"$bin/checkov" --file "$out/chart.yaml" --framework kubernetes --quiet --compact \
  --skip-download --skip-check CKV_K8S_11,CKV_K8S_15,CKV_K8S_21,CKV_K8S_38,CKV_K8S_43
echo "kube-score:"
"$bin/kube-score" score "$out/chart.yaml" --output-format ci --ignore-container-cpu-limit \
  --ignore-test container-image-pull-policy,deployment-has-host-podantiaffinity |
  grep -v '^\[OK\]\|^\[SKIPPED\]' | tee "$out/kube-score.txt" || true
if [ -s "$out/kube-score.txt" ]; then
  echo "kube-score found the above" >&2
  exit 1
fi
echo "no findings"
