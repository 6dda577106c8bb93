{{/*
Labels every object of the release carries besides its own app.kubernetes.io/name and component: the
part-of label of the kustomizations, and Helm's standard ones.
*/}}
{{- define "wva.labels" -}}
app.kubernetes.io/part-of: workload-variant-autoscaler
{{ include "wva.helmLabels" . }}
{{- end }}

{{/* Helm's standard labels alone (the examples: they are not part of the adapter). */}}
{{- define "wva.helmLabels" -}}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The adapter's pod and Service selector (fixed: one adapter per cluster). */}}
{{- define "wva.selector" -}}
app.kubernetes.io/component: controller
app.kubernetes.io/name: wva-adapter
{{- end }}

{{/* Name of the Secret holding the serving certificate (tls.mode helm, certManager, secret). */}}
{{- define "wva.tlsSecret" -}}
{{- if eq .Values.tls.mode "secret" -}}
{{- required "tls.secret.name is required with tls.mode=secret" .Values.tls.secret.name -}}
{{- else -}}
wva-adapter-tls
{{- end -}}
{{- end }}

{{/* The DNS names the aggregator and in-cluster clients dial. */}}
{{- define "wva.dnsNames" -}}
- wva-adapter
- wva-adapter.{{ .Release.Namespace }}
- wva-adapter.{{ .Release.Namespace }}.svc
- wva-adapter.{{ .Release.Namespace }}.svc.cluster.local
{{- end }}

{{/* Reject combinations that cannot work, with a message naming the values. */}}
{{- define "wva.validate" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) -}}
{{- fail (printf "replicas=%v needs leaderElection.enabled=true: without a Lease every replica would decide and write VA status" .Values.replicas) -}}
{{- end -}}
{{- if and (eq .Values.tls.mode "secret") (not .Values.tls.secret.name) -}}
{{- fail "tls.secret.name is required with tls.mode=secret: the kubernetes.io/tls Secret the adapter serves" -}}
{{- end -}}
{{- if and (eq .Values.tls.mode "secret") (eq .Values.mode "hpa") (not .Values.tls.secret.caBundle) -}}
{{- fail "tls.mode=secret with mode=hpa needs tls.secret.caBundle (base64 PEM of the CA) for the APIService" -}}
{{- end -}}
{{- end }}
