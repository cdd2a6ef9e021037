{{/*
The router's routing file (docs/router.md). Generated unless router.routes is set: one pool per
model, discovered from that backend's Service (ready EndpointSlice endpoints only), one rule per
model matching its served name and its values name, and the first model as the default.
*/}}
{{- define "strata.router.routes" -}}
{{- if .Values.router.routes -}}
{{- toYaml .Values.router.routes -}}
{{- else -}}
{{- $root := . -}}
{{- $pools := dict -}}
{{- $rules := list -}}
{{- range .Values.models -}}
{{- $_ := set $pools .name (dict "discovery" (dict "service" (include "strata.backendName" (list $root .)) "namespace" $root.Release.Namespace "port" "http")) -}}
{{- $names := list .servedModelName -}}
{{- if ne .name .servedModelName -}}{{- $names = append $names .name -}}{{- end -}}
{{- $rules = append $rules (dict "name" (printf "model-%s" .name) "match" (dict "model" $names) "pool" .name "policy" $root.Values.router.policy) -}}
{{- end -}}
{{- $default := dict "pool" (index .Values.models 0).name "policy" .Values.router.policy -}}
{{- dict "pools" $pools "rules" $rules "default" $default | toYaml -}}
{{- end -}}
{{- end -}}
