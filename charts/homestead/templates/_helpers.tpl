{{/* The app.kubernetes.io/name of the operator's objects: nameOverride, default homestead
(the SCIM service's is this with -scim). */}}
{{- define "homestead.name" -}}
{{ .Values.nameOverride | default "homestead" | trunc 50 | trimSuffix "-" }}
{{- end -}}

{{/* The prefix of every object name: fullnameOverride, default homestead (not the release
name: the cluster-scoped objects, the admission policies among them, keep one name whatever the
release is called). Lowercase letters, digits and '-', at most 40 characters (values.schema.json),
so every suffixed name stays a DNS label. */}}
{{- define "homestead.fullname" -}}
{{ .Values.fullnameOverride | default "homestead" }}
{{- end -}}

{{/* Labels on every object of the chart. */}}
{{- define "homestead.labels" -}}
app.kubernetes.io/name: {{ include "homestead.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Labels of the SCIM service's objects. */}}
{{- define "homestead.scimLabels" -}}
app.kubernetes.io/name: {{ include "homestead.name" . }}-scim
app.kubernetes.io/part-of: homestead
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Labels of the homes API's objects. */}}
{{- define "homestead.homesApiLabels" -}}
app.kubernetes.io/name: {{ include "homestead.name" . }}-homes-api
app.kubernetes.io/part-of: homestead
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The container image: [registry/]repository, then @digest if set, else :tag (default: the
chart's appVersion). */}}
{{- define "homestead.image" -}}
{{- $repository := .Values.image.repository -}}
{{- with .Values.image.registry }}{{ $repository = printf "%s/%s" . $repository }}{{ end -}}
{{- if .Values.image.digest -}}
{{ $repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ $repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* Pod-level settings both Deployments share from `pod`, a map with nodeSelector,
tolerations, affinity and priorityClassName. */}}
{{- define "homestead.placement" -}}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The operator's ServiceAccount: operator.serviceAccount.name, default homestead. */}}
{{- define "homestead.serviceAccountName" -}}
{{ .Values.operator.serviceAccount.name | default (include "homestead.fullname" .) }}
{{- end -}}

{{/* The operator's user name, as the admission policies match it. */}}
{{- define "homestead.operatorUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "homestead.serviceAccountName" . }}
{{- end -}}

{{/* Refuses values Homestead never accepts. */}}
{{- define "homestead.validate" -}}
{{- if has "cluster-admin" .Values.operator.allowedRoles -}}
{{- fail "operator.allowedRoles may not contain cluster-admin: Homestead never grants cluster-wide administration" -}}
{{- end -}}
{{- end -}}

{{/* operator.allowedRoles as a CEL list's items: 'admin', 'edit', 'view'. */}}
{{- define "homestead.celRoles" -}}
{{- range $i, $role := .Values.operator.allowedRoles }}{{ if $i }}, {{ end }}'{{ $role }}'{{ end -}}
{{- end -}}

{{/* operator.allowedRoles for people: admin, edit and view. */}}
{{- define "homestead.roleList" -}}
{{- $roles := .Values.operator.allowedRoles -}}
{{- $n := len $roles -}}
{{- range $i, $role := $roles }}{{ if and $i (lt (add1 $i) $n) }}, {{ else if $i }} and {{ end }}{{ $role }}{{ end -}}
{{- end -}}

{{/* operator.allowedNamespaces (default <namespacePrefix>*) and <workspacePrefix>* as one RE2 expression for the
admission policy, each glob as the operator reads it (the glob crate's `*`, `?`, `[a-z]`,
`[!a-z]`): user-*,lab-[!x]? become ^(user-.*|lab-[^x].)$. The schema admits only balanced
classes, so the expression always compiles. */}}
{{- define "homestead.namespacePattern" -}}
{{- $patterns := append (.Values.operator.allowedNamespaces | default (list (printf "%s*" .Values.operator.namespacePrefix))) (printf "%s*" .Values.operator.workspacePrefix) -}}
^({{ range $i, $p := $patterns }}{{ if $i }}|{{ end }}{{ regexQuoteMeta $p | replace "\\*" ".*" | replace "\\?" "." | replace "\\[!" "[^" | replace "\\[" "[" | replace "\\]" "]" }}{{ end }})$
{{- end -}}

{{/* The egress rules of Homestead's own NetworkPolicies: the API server and DNS. */}}
{{- define "homestead.egress" -}}
egress:
  - ports:
      {{- range .Values.networkPolicy.apiServerPorts }}
      - protocol: TCP
        port: {{ . }}
      {{- end }}
    {{- with .Values.networkPolicy.apiServerCIDRs }}
    to:
      {{- range . }}
      - ipBlock:
          cidr: {{ . }}
      {{- end }}
    {{- end }}
  - ports:
      - protocol: UDP
        port: 53
      - protocol: TCP
        port: 53
{{- end -}}

{{/* A list of strings as the items of a CEL list literal: 'a', 'b' (empty: nothing). The
values schema keeps quotes out of every item. */}}
{{- define "homestead.quotedList" -}}
{{- range $i, $item := . }}{{ if $i }}, {{ end }}'{{ $item }}'{{ end -}}
{{- end -}}

{{/* The Pods' securityContext: non-root with the runtime's default seccomp profile, and the
image's own user and group (nonroot, 65532) stated so scanners and admission policies that
require explicit ids see them, unless podSecurityContext.runAsUser/runAsGroup are null (OpenShift's
restricted-v2 assigns a uid from the namespace's range and refuses any other). */}}
{{- define "homestead.podSecurityContext" -}}
runAsNonRoot: true
{{- with .Values.podSecurityContext.runAsUser }}
runAsUser: {{ . }}
{{- end }}
{{- with .Values.podSecurityContext.runAsGroup }}
runAsGroup: {{ . }}
{{- end }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}
