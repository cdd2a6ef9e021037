// A small NetworkPolicy evaluator (networking.k8s.io/v1 semantics) over rendered manifests:
// which pod may open a TCP connection to which other pod's port. A connection needs the
// source's egress AND the destination's ingress to allow it; a pod selected by no policy of
// a direction is open in that direction. ipBlock peers count as matching every pod (the
// conservative reading, so a broad CIDR can never hide an extra edge).
import type { K8sObject } from './manifests.js';

export interface Pod {
  name: string;
  namespace: string;
  namespaceLabels: Record<string, string>;
  labels: Record<string, string>;
  ports: number[];
}

interface Peer {
  podSelector?: Selector;
  namespaceSelector?: Selector;
  ipBlock?: { cidr: string };
}
interface Selector {
  matchLabels?: Record<string, string>;
  matchExpressions?: { key: string; operator: string; values?: string[] }[];
}
interface Rule {
  from?: Peer[];
  to?: Peer[];
  ports?: { port?: number; protocol?: string }[];
}

export function selects(sel: Selector | undefined, labels: Record<string, string>): boolean {
  if (!sel) return true;
  for (const [k, v] of Object.entries(sel.matchLabels ?? {})) if (labels[k] !== v) return false;
  for (const e of sel.matchExpressions ?? []) {
    const has = e.key in labels;
    if (e.operator === 'Exists' && !has) return false;
    if (e.operator === 'DoesNotExist' && has) return false;
    if (e.operator === 'In' && !(has && e.values?.includes(labels[e.key] as string))) return false;
    if (e.operator === 'NotIn' && has && e.values?.includes(labels[e.key] as string)) return false;
  }
  return true;
}

function peerMatches(peer: Peer, policyNs: string, other: Pod): boolean {
  if (peer.ipBlock) return true;
  const nsOk = peer.namespaceSelector
    ? selects(peer.namespaceSelector, other.namespaceLabels)
    : other.namespace === policyNs;
  return nsOk && selects(peer.podSelector, other.labels);
}

function ruleAllows(
  rule: Rule,
  peers: Peer[] | undefined,
  policyNs: string,
  other: Pod,
  port: number,
): boolean {
  const portOk =
    !rule.ports ||
    rule.ports.length === 0 ||
    rule.ports.some((p) => (p.protocol ?? 'TCP') === 'TCP' && (p.port === undefined || p.port === port));
  const peerOk = !peers || peers.length === 0 || peers.some((p) => peerMatches(p, policyNs, other));
  return portOk && peerOk;
}

function allowed(
  policies: K8sObject[],
  direction: 'Ingress' | 'Egress',
  self: Pod,
  other: Pod,
  port: number,
): boolean {
  const applying = policies.filter(
    (p) =>
      p.metadata.namespace === undefined &&
      selects(p.spec.podSelector, self.labels) &&
      (p.spec.policyTypes ?? ['Ingress']).includes(direction),
  );
  if (applying.length === 0) return true;
  return applying.some((p) => {
    const rules: Rule[] = (direction === 'Ingress' ? p.spec.ingress : p.spec.egress) ?? [];
    return rules.some((r) =>
      ruleAllows(r, direction === 'Ingress' ? r.from : r.to, self.namespace, other, port),
    );
  });
}

/** Every "src -> dst:port" connection the policies allow among the given pods. */
export function allowedEdges(policies: K8sObject[], pods: Pod[]): string[] {
  const edges: string[] = [];
  for (const src of pods) {
    for (const dst of pods) {
      if (src === dst) continue;
      for (const port of dst.ports) {
        if (allowed(policies, 'Egress', src, dst, port) && allowed(policies, 'Ingress', dst, src, port)) {
          edges.push(`${src.name} -> ${dst.name}:${port}`);
        }
      }
    }
  }
  return edges.sort();
}

/** The pods of the release's Deployments, DaemonSets and Jobs, named by component (and model). */
export function releasePods(docs: K8sObject[], namespace: string): Pod[] {
  return docs
    .filter((d) => d.kind === 'Deployment' || d.kind === 'DaemonSet' || d.kind === 'Job')
    .map((d) => {
      const labels = d.spec.template.metadata.labels as Record<string, string>;
      const model = labels['strata.dev/model'];
      const comp = labels['app.kubernetes.io/component'] as string;
      return {
        name: model ? `${comp}[${model}]` : comp,
        namespace,
        namespaceLabels: { 'kubernetes.io/metadata.name': namespace },
        labels,
        ports: d.spec.template.spec.containers.flatMap((c: { ports?: { containerPort: number }[] }) =>
          (c.ports ?? []).map((p) => p.containerPort),
        ),
      };
    });
}
