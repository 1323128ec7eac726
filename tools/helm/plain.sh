#!/usr/bin/env bash
# Writes the plain install (rbac/ and manifests/, for `kubectl apply -k`) from the Helm chart,
# its one source: `helm template` of charts/homestead with its default values (the SCIM service
# and the homes API enabled), each template into the file that has carried its objects, a header saying so, and
# the labels only Helm means (helm.sh/chart) and its `# Source:` lines left out. With --check,
# fails if a committed file differs from what it would write. Run by `just generate`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
helm=$("$root/tools/helm/install.sh")
check=${1:-}

# template of charts/homestead/templates/ -> kinds to take from it (all: every kind) -> file
routes=(
  "serviceaccount.yaml all rbac/service-account.yaml"
  "clusterrole.yaml all rbac/cluster-role.yaml"
  "roles.yaml all rbac/roles.yaml"
  "admission-policy.yaml all rbac/admission-policy.yaml"
  "hr.yaml all rbac/hr.yaml"
  "shares.yaml all rbac/shares.yaml"
  "workspaces.yaml all rbac/workspaces.yaml"
  "auditor.yaml all rbac/auditor.yaml"
  "viewer.yaml all rbac/viewer.yaml"
  "deployment.yaml all manifests/deployment.yaml"
  "scim.yaml ServiceAccount,ClusterRole,ClusterRoleBinding,ValidatingAdmissionPolicy,ValidatingAdmissionPolicyBinding manifests/scim/rbac.yaml"
  "scim.yaml Deployment,Service,PodDisruptionBudget manifests/scim/deployment.yaml"
  "homes-api.yaml ServiceAccount,ClusterRole,ClusterRoleBinding,RoleBinding manifests/homes-api/rbac.yaml"
)

# render TEMPLATE KINDS: the template's documents of KINDS, Helm-only labels and comments out.
render() {
  "$helm" template homestead "$root/charts/homestead" --namespace homestead-system \
    --set scim.enabled=true --set homesApi.enabled=true --set homesApi.caBundle=Cg== \
    --kube-version 1.34.4 --show-only "templates/$1" |
    awk -v kinds=",$2," '
      function flush() {
        if (doc != "" && (kinds == ",all," || index(kinds, "," kind ",") > 0)) {
          printf "%s", (n++ ? "---\n" : "") doc
        }
        doc = ""; kind = ""
      }
      /^---$/ { flush(); next }
      /^# Source: / { next }
      /^[[:space:]]*helm\.sh\/chart: / { next }
      /^kind: / { kind = $2 }
      { sub(/[ \t]+$/, ""); doc = doc $0 "\n" }
      END { flush() }'
}

status=0
for route in "${routes[@]}"; do
  read -r template kinds file <<<"$route"
  out=$(mktemp)
  {
    echo "# Generated from charts/homestead/templates/$template by \`just generate\` (tools/helm/plain.sh);"
    echo "# edit the chart, not this file."
    render "$template" "$kinds"
  } >"$out"
  if [ "$check" = --check ]; then
    if ! diff -u "$root/$file" "$out" >&2; then
      echo "$file is stale: run just generate (it is rendered from the chart)" >&2
      status=1
    fi
    rm -f "$out"
  else
    mv "$out" "$root/$file"
  fi
done
exit $status
