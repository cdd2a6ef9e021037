// Rendered manifests as plain objects, with small typed accessors for the tests.
import { parseAllDocuments } from 'yaml';

// biome-ignore lint/suspicious/noExplicitAny: Kubernetes objects are checked field by field in tests.
type Loose = any;
export type K8sObject = {
  apiVersion: string;
  kind: string;
  metadata: { name: string; [k: string]: Loose };
  [k: string]: Loose;
};

export function parseManifests(text: string): K8sObject[] {
  const docs: K8sObject[] = [];
  for (const doc of parseAllDocuments(text)) {
    if (doc.errors.length > 0) throw new Error(`rendered YAML does not parse: ${doc.errors[0]?.message}`);
    const value = doc.toJS() as K8sObject | null;
    if (value) docs.push(value);
  }
  return docs;
}

export function ofKind(docs: K8sObject[], kind: string): K8sObject[] {
  return docs.filter((d) => d.kind === kind);
}

export function byName(docs: K8sObject[], kind: string, name: string): K8sObject {
  const found = docs.find((d) => d.kind === kind && d.metadata.name === name);
  if (!found)
    throw new Error(`no ${kind} ${name}; have ${docs.map((d) => `${d.kind}/${d.metadata.name}`).join(', ')}`);
  return found;
}

export function component(doc: K8sObject): string | undefined {
  return doc.metadata.labels?.['app.kubernetes.io/component'];
}

/** The pod template of a Deployment or Job. */
export function podSpec(doc: K8sObject) {
  return doc.spec.template.spec;
}

export function container(doc: K8sObject, name: string) {
  const c = podSpec(doc).containers.find((x: { name: string }) => x.name === name);
  if (!c) throw new Error(`${doc.metadata.name} has no container ${name}`);
  return c;
}

export function envOf(c: { env?: { name: string; value?: string }[] }): Record<string, string | undefined> {
  return Object.fromEntries((c.env ?? []).map((e) => [e.name, e.value]));
}
