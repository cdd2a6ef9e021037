{{/* HPA (autoscaling/v2, CPU) for a stateless component: (list $ "edge" .Values.edge). */}}
{{- define "strata.hpa" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- $v := index . 2 -}}
{{- if $v.autoscaling.enabled }}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ include "strata.componentName" (list $root $component) }}
  labels:
    {{- include "strata.labels" (list $root $component) | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ include "strata.componentName" (list $root $component) }}
  minReplicas: {{ int $v.autoscaling.minReplicas }}
  maxReplicas: {{ int $v.autoscaling.maxReplicas }}
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: {{ int $v.autoscaling.targetCPUUtilizationPercentage }}
  behavior:
    # Streams are long: scale down slowly so draining pods are not replaced at once.
    scaleDown:
      stabilizationWindowSeconds: 300
{{- end }}
{{- end -}}

{{/* PodDisruptionBudget: (list $ "edge" .Values.edge). */}}
{{- define "strata.pdb" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- $v := index . 2 -}}
{{- if $v.pdb.enabled }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "strata.componentName" (list $root $component) }}
  labels:
    {{- include "strata.labels" (list $root $component) | nindent 4 }}
spec:
  minAvailable: {{ $v.pdb.minAvailable }}
  selector:
    matchLabels:
      {{- include "strata.selectorLabels" (list $root $component) | nindent 6 }}
{{- end }}
{{- end -}}

{{/* Env every Strata service reads (services/common): port, log level, drain, OTLP. */}}
{{- define "strata.commonEnv" -}}
{{- $root := index . 0 -}}
{{- $port := index . 1 -}}
{{- $drainMs := index . 2 -}}
- { name: HOST, value: "0.0.0.0" }
- { name: PORT, value: {{ $port | quote }} }
- { name: LOG_LEVEL, value: {{ $root.Values.logLevel | quote }} }
- { name: STRATA_DRAIN_TIMEOUT_MS, value: {{ $drainMs | quote }} }
{{- with $root.Values.otlpEndpoint }}
- { name: OTEL_EXPORTER_OTLP_ENDPOINT, value: {{ . | quote }} }
{{- end }}
{{- end -}}

{{/* Probes of a Node service on its own port. */}}
{{- define "strata.serviceProbes" -}}
readinessProbe:
  httpGet: { path: /health/ready, port: http }
  periodSeconds: 5
  failureThreshold: 2
livenessProbe:
  httpGet: { path: /health/live, port: http }
  periodSeconds: 10
  failureThreshold: 6
  timeoutSeconds: 5
{{- end -}}
