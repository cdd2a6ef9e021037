{{/*
The request identity the edge signs and the router and backends verify (docs/kubernetes.md,
Request identity): the Secret holding STRATA_IDENTITY_KEYS, the given one or the chart's.
*/}}
{{- define "strata.identitySecretName" -}}
{{- default (include "strata.componentName" (list . "identity")) .Values.identity.existingSecret -}}
{{- end -}}

{{/* Env of a container: (include "strata.identityEnv" (list . true)); true adds the mode (router, backends). */}}
{{- define "strata.identityEnv" -}}
{{- $root := index . 0 -}}
- name: STRATA_IDENTITY_KEYS
  valueFrom:
    secretKeyRef: { name: {{ include "strata.identitySecretName" $root }}, key: keys }
{{- if index . 1 }}
- { name: STRATA_IDENTITY_MODE, value: {{ $root.Values.identity.mode | quote }} }
{{- end }}
{{- end -}}
