{{/* Peers and egress rules shared by networkpolicies.yaml. */}}
{{- define "strata.np.peer" -}}
- podSelector:
    matchLabels:
      {{- include "strata.selectorLabels" . | nindent 6 }}
{{- end -}}
{{- define "strata.np.prometheus" -}}
- namespaceSelector:
    {{- toYaml .Values.networkPolicy.prometheus.namespaceSelector | nindent 4 }}
  podSelector:
    {{- toYaml .Values.networkPolicy.prometheus.podSelector | nindent 4 }}
{{- end -}}
{{- define "strata.np.dns" -}}
- to:
    - namespaceSelector:
        matchLabels: { kubernetes.io/metadata.name: kube-system }
      podSelector:
        matchLabels: { k8s-app: kube-dns }
  ports:
    - { protocol: UDP, port: 53 }
    - { protocol: TCP, port: 53 }
{{- end -}}
{{- define "strata.np.otlp" -}}
{{- if and .Values.otlpEndpoint .Values.networkPolicy.otlpEgress.cidrs }}
- to:
    {{- range .Values.networkPolicy.otlpEgress.cidrs }}
    - ipBlock: { cidr: {{ . }} }
    {{- end }}
  ports:
    - { protocol: TCP, port: {{ int .Values.networkPolicy.otlpEgress.port }} }
{{- end }}
{{- end -}}
{{- define "strata.np.redisEgress" -}}
- to:
    {{- if .Values.redis.enabled }}
    {{- include "strata.np.peer" (list . "redis") | nindent 4 }}
    {{- else }}
    {{- range .Values.redis.externalEgressCidrs }}
    - ipBlock: { cidr: {{ . }} }
    {{- end }}
    {{- end }}
  ports:
    - { protocol: TCP, port: {{ int .Values.redis.port }} }
{{- end -}}
