// Synthesizes a stack from a config document and returns the Terraform JSON as an object, plus
// small lookups by resource type. Every stack test goes through the real cdktf synthesizer.
import { Testing } from 'cdktf';
import { parseInfraConfig } from '../src/config/load.js';
import type { InfraConfigInput } from '../src/config/schema.js';
import { StrataEksStack } from '../src/stack.js';

type Block = Record<string, Record<string, Record<string, unknown>>>;

export interface Synthesized {
  /** The raw JSON string, for cdktf's own matchers (Testing.toHaveResourceWithProperties). */
  json: string;
  resource: Block;
  data: Block;
  output: Record<string, { value: unknown; description?: string }>;
  provider: Record<string, Record<string, unknown>[]>;
  terraform: Record<string, unknown>;
  /** All resources of one type, as a list (their logical ids dropped). */
  all(type: string): Record<string, unknown>[];
  /** The resource of one type whose `field` equals `value`; throws when there is not exactly one. */
  one(type: string, field: string, value: unknown): Record<string, unknown>;
}

export function synth(input: InfraConfigInput = {}): Synthesized {
  const config = parseInfraConfig(input);
  const app = Testing.app();
  const stack = new StrataEksStack(app, config.clusterName, config);
  const json = Testing.synth(stack);
  const doc = JSON.parse(json) as Omit<Synthesized, 'json' | 'all' | 'one'>;
  const all = (type: string) => Object.values(doc.resource[type] ?? {});
  return {
    ...doc,
    data: doc.data ?? {},
    json,
    all,
    one(type, field, value) {
      const hits = all(type).filter((r) => JSON.stringify(r[field]) === JSON.stringify(value));
      if (hits.length !== 1) throw new Error(`${hits.length} ${type} with ${field}=${JSON.stringify(value)}`);
      return hits[0] as Record<string, unknown>;
    },
  };
}

/** The Terraform reference ("aws_x.logical_id") of the resource whose body is `body`. */
export function refOf(s: Synthesized, type: string, body: Record<string, unknown>): string {
  const entry = Object.entries(s.resource[type] ?? {}).find(([, b]) => b === body);
  if (!entry) throw new Error(`not a ${type} of this stack`);
  return `${type}.${entry[0]}`;
}
