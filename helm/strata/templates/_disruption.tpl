{{/*
Disruption safety shared by the workloads: PriorityClass names, topology spreads, budgets.
*/}}

{{/*
The PriorityClass of a tier (critical, backend, default): (list $ "critical"). The value's
name, else "<fullname>-<tier>" when the chart creates the classes, else "" (no class).
*/}}
{{- define "strata.priorityClassName" -}}
{{- $root := index . 0 -}}
{{- $tier := index . 1 -}}
{{- $pc := $root.Values.priorityClasses -}}
{{- $class := index $pc $tier -}}
{{- if $class.name -}}
{{- $class.name -}}
{{- else if $pc.create -}}
{{- include "strata.componentName" (list $root $tier) -}}
{{- end -}}
{{- end -}}

{{/*
topologySpreadConstraints over zones and nodes, maxSkew 1, for the pods with the given
selector labels: (list $ (include "strata.selectorLabels" (list $ "edge"))). Renders nothing
when topologySpread.enabled is false.
*/}}
{{- define "strata.topologySpread" -}}
{{- $root := index . 0 -}}
{{- $selector := index . 1 -}}
{{- $t := $root.Values.topologySpread -}}
{{- if $t.enabled -}}
topologySpreadConstraints:
{{- range $c := list (list "topology.kubernetes.io/zone" $t.zoneWhenUnsatisfiable) (list "kubernetes.io/hostname" $t.nodeWhenUnsatisfiable) }}
  - maxSkew: 1
    topologyKey: {{ index $c 0 }}
    whenUnsatisfiable: {{ index $c 1 }}
    # Nodes whose taints the pod does not tolerate (GPU nodes for the CPU components) are no
    # place to spread to, so they do not count.
    nodeTaintsPolicy: Honor
    labelSelector:
      matchLabels:
        {{- $selector | nindent 8 }}
    # The pods of one ReplicaSet: during a rollout the new pods spread among themselves.
    matchLabelKeys: [pod-template-hash]
{{- end }}
{{- end -}}
{{- end -}}

{{/* A PodDisruptionBudget's limit: minAvailable when set, else maxUnavailable. */}}
{{- define "strata.budgetLimit" -}}
{{- if hasKey . "minAvailable" -}}
minAvailable: {{ .minAvailable }}
{{- else -}}
maxUnavailable: {{ .maxUnavailable }}
{{- end -}}
{{- end -}}
