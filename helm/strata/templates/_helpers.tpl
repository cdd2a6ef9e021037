{{/*
Names. Every object is "<fullname>-<component>", trimmed to 63 characters because Service
and label values are DNS labels.
*/}}
{{- define "strata.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "strata.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "<fullname>-<suffix>", e.g. (include "strata.componentName" (list . "edge")). */}}
{{- define "strata.componentName" -}}
{{- $root := index . 0 -}}
{{- printf "%s-%s" (include "strata.fullname" $root) (index . 1) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* A backend's objects: "<fullname>-backend-<model name>". */}}
{{- define "strata.backendName" -}}
{{- $root := index . 0 -}}
{{- printf "%s-backend-%s" (include "strata.fullname" $root) (index . 1).name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Labels. Selector labels are name + instance + component (+ strata.dev/model on backends);
dashboards, ServiceMonitors and NetworkPolicies select on exactly these.
*/}}
{{- define "strata.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "strata.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "strata.labels" -}}
{{- $root := index . 0 -}}
{{ include "strata.selectorLabels" . }}
app.kubernetes.io/part-of: strata
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" }}
{{- with $root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Backend labels: the common ones plus strata.dev/model (the model's name in values). */}}
{{- define "strata.backendSelectorLabels" -}}
{{ include "strata.selectorLabels" (list (index . 0) "backend") }}
strata.dev/model: {{ (index . 1).name }}
{{- end -}}

{{- define "strata.backendLabels" -}}
{{ include "strata.labels" (list (index . 0) "backend") }}
strata.dev/model: {{ (index . 1).name }}
{{- end -}}

{{/* An image reference: (include "strata.image" (list . .Values.edge.image)). */}}
{{- define "strata.image" -}}
{{- $root := index . 0 -}}
{{- $img := index . 1 -}}
{{- $registry := default $root.Values.image.registry $img.registry -}}
{{- $tag := default (default $root.Chart.AppVersion $root.Values.image.tag) $img.tag -}}
{{- if $registry -}}
{{- printf "%s/%s:%s" $registry $img.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" $img.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* Pod and container security contexts shared by every Strata container. */}}
{{- define "strata.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .runAsUser }}
runAsGroup: {{ .runAsUser }}
fsGroup: {{ .runAsUser }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "strata.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* Redis URL the edge and router use: the in-chart Redis or the external one. */}}
{{- define "strata.redisUrl" -}}
{{- if .Values.redis.enabled -}}
{{- printf "redis://%s:%d" (include "strata.componentName" (list . "redis")) (int .Values.redis.port) -}}
{{- else -}}
{{- .Values.redis.externalUrl -}}
{{- end -}}
{{- end -}}

{{/* Where the warmup Job sends traffic: through Envoy (the full path) or straight to the edge. */}}
{{- define "strata.warmupUrl" -}}
{{- if and (eq .Values.warmup.target "envoy") .Values.envoy.enabled .Values.envoy.listeners.http.enabled -}}
{{- printf "http://%s:%d" (include "strata.componentName" (list . "envoy-internal")) (int .Values.envoy.listeners.http.port) -}}
{{- else -}}
{{- printf "http://%s:%d" (include "strata.componentName" (list . "edge")) (int .Values.edge.port) -}}
{{- end -}}
{{- end -}}

{{/*
A backend's termination grace, seconds: preStop sleep + drain deadline + margin, unless set.
Set explicitly, it must still exceed preStop + drain, or the kubelet would SIGKILL streams the
backend is still draining; rendering fails and says so.
*/}}
{{- define "strata.backendGraceSeconds" -}}
{{- $root := index . 0 -}}
{{- $m := index . 1 -}}
{{- $b := $root.Values.backend -}}
{{- $drainS := div (add (int (default $b.drainTimeoutMs $m.drainTimeoutMs)) 999) 1000 -}}
{{- $floor := add (int $b.preStopSleepSeconds) $drainS -}}
{{- $grace := default (add $floor (int $b.terminationGraceMarginSeconds)) $m.terminationGracePeriodSeconds -}}
{{- if le (int $grace) (int $floor) -}}
{{- fail (printf "models[%s].terminationGracePeriodSeconds=%d must exceed backend.preStopSleepSeconds + drain timeout = %ds" $m.name (int $grace) (int $floor)) -}}
{{- end -}}
{{- $grace -}}
{{- end -}}
