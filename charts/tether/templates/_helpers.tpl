{{/* Labels every object carries: the same as manifests/ (kustomize). */}}
{{- define "tether.labels" -}}
app.kubernetes.io/name: tether
app.kubernetes.io/component: {{ . }}
app.kubernetes.io/part-of: tether
{{- end -}}

{{/* Selector of the control plane's pods. */}}
{{- define "tether.selector" -}}
app.kubernetes.io/name: tether
app.kubernetes.io/component: control-plane
{{- end -}}

{{/*
tether.validate fails the render with a message naming the value and the
fix; it is included once, by deployment.yaml.
*/}}
{{- define "tether.validate" -}}
{{- if ne .Release.Namespace "tether-system" -}}
{{- fail (printf "release namespace %q: Tether's names are fixed (docs/contract.md); install with --namespace tether-system" .Release.Namespace) -}}
{{- end -}}
{{- if not (has .Values.certMode (list "self-managed" "cert-manager")) -}}
{{- fail (printf "certMode %q: must be self-managed or cert-manager" .Values.certMode) -}}
{{- end -}}
{{- if not (has .Values.artifacts.mode (list "in-cluster" "s3")) -}}
{{- fail (printf "artifacts.mode %q: must be in-cluster (the quick-start store) or s3 (your bucket)" .Values.artifacts.mode) -}}
{{- end -}}
{{- if and (eq .Values.artifacts.mode "s3") (or (not .Values.artifacts.s3.bucket) (not .Values.artifacts.s3.endpoint) (not .Values.artifacts.s3.credentialsSecret)) -}}
{{- fail "artifacts.mode s3 needs artifacts.s3.endpoint, artifacts.s3.bucket and artifacts.s3.credentialsSecret" -}}
{{- end -}}
{{- if not .Values.podCreators -}}
{{- fail "podCreators is empty: list the identities the Job controller creates pods as (system:serviceaccount:kube-system:job-controller with --use-service-account-credentials, else system:kube-controller-manager), or no bound job's pod can be created" -}}
{{- end -}}
{{- if lt (int .Values.replicas) 1 -}}
{{- fail (printf "replicas %v: must be at least 1" .Values.replicas) -}}
{{- end -}}
{{- end -}}

{{/* tether.resourceList renders a map such as {cpu: 50m} as cpu=50m,memory=64Mi (sorted). */}}
{{- define "tether.resourceList" -}}
{{- $parts := list -}}
{{- range $k, $v := . -}}
{{- $parts = append $parts (printf "%s=%v" $k $v) -}}
{{- end -}}
{{- join "," $parts -}}
{{- end -}}

{{/* tether.celStrings renders a list of strings as CEL string literals, comma-separated: 'a', 'b'. */}}
{{- define "tether.celStrings" -}}
{{- $parts := list -}}
{{- range . -}}
{{- $parts = append $parts (printf "'%s'" (. | replace "\\" "\\\\" | replace "'" "\\'")) -}}
{{- end -}}
{{- join ", " $parts -}}
{{- end -}}
