// Validates custom resources against the openAPIV3Schema of a CRD file: types, properties (an
// unknown field is an error, as with kubectl's strict field validation), required, enum, pattern,
// bounds, items, maps and int-or-string. The CEL rules (x-kubernetes-validations) are not
// evaluated; the tests check the ones that matter to us directly.
import { readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';

export interface Schema {
  type?: string;
  properties?: Record<string, Schema>;
  additionalProperties?: Schema | boolean;
  items?: Schema;
  required?: string[];
  enum?: unknown[];
  pattern?: string;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  minItems?: number;
  maxItems?: number;
  anyOf?: Schema[];
  'x-kubernetes-int-or-string'?: boolean;
  'x-kubernetes-preserve-unknown-fields'?: boolean;
}

interface Crd {
  spec: { names: { kind: string }; versions: { name: string; schema: { openAPIV3Schema: Schema } }[] };
}

/** The schema of one served version of the CRD in `file`, with its kind. */
export function crdSchema(file: string, version: string): { kind: string; schema: Schema } {
  const docs = parseAllDocuments(readFileSync(file, 'utf8')).map((d) => d.toJS() as Crd | null);
  const crd = docs.find((d) => d?.spec?.versions);
  const v = crd?.spec.versions.find((x) => x.name === version);
  if (!crd || !v) throw new Error(`${file} has no CRD version ${version}`);
  return { kind: crd.spec.names.kind, schema: v.schema.openAPIV3Schema };
}

function typeOf(value: unknown): string {
  if (Array.isArray(value)) return 'array';
  if (value === null) return 'null';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  return typeof value;
}

/** Every violation, as "<path>: <problem>"; empty when the value conforms. */
export function validate(schema: Schema, value: unknown, path = ''): string[] {
  const at = path || '(root)';
  const actual = typeOf(value);
  if (schema['x-kubernetes-int-or-string']) {
    if (actual !== 'integer' && actual !== 'string') return [`${at}: must be an integer or a string`];
    if (actual === 'string' && schema.anyOf) {
      const str = schema.anyOf.find((s) => s.type === 'string');
      const pattern = schema.pattern ?? str?.pattern;
      if (pattern && !new RegExp(pattern).test(value as string)) return [`${at}: does not match ${pattern}`];
    }
    return [];
  }
  if (schema.type && schema.type !== actual && !(schema.type === 'number' && actual === 'integer')) {
    return [`${at}: must be ${schema.type}, got ${actual}`];
  }
  const problems: string[] = [];
  if (schema.enum && !schema.enum.includes(value)) {
    problems.push(`${at}: ${JSON.stringify(value)} is not one of ${JSON.stringify(schema.enum)}`);
  }
  if (actual === 'string') {
    const s = value as string;
    if (schema.pattern && !new RegExp(schema.pattern).test(s))
      problems.push(`${at}: does not match ${schema.pattern}`);
    if (schema.minLength !== undefined && s.length < schema.minLength) problems.push(`${at}: too short`);
    if (schema.maxLength !== undefined && s.length > schema.maxLength) problems.push(`${at}: too long`);
  }
  if (actual === 'integer' || actual === 'number') {
    const n = value as number;
    if (schema.minimum !== undefined && n < schema.minimum) problems.push(`${at}: below ${schema.minimum}`);
    if (schema.maximum !== undefined && n > schema.maximum) problems.push(`${at}: above ${schema.maximum}`);
  }
  if (actual === 'array') {
    const list = value as unknown[];
    if (schema.minItems !== undefined && list.length < schema.minItems) problems.push(`${at}: too few items`);
    if (schema.maxItems !== undefined && list.length > schema.maxItems)
      problems.push(`${at}: too many items`);
    if (schema.items) {
      const items = schema.items;
      list.forEach((item, i) => {
        problems.push(...validate(items, item, `${path}[${i}]`));
      });
    }
  }
  if (actual === 'object') {
    const obj = value as Record<string, unknown>;
    for (const key of schema.required ?? []) {
      if (!(key in obj)) problems.push(`${at}: missing required field "${key}"`);
    }
    for (const [key, child] of Object.entries(obj)) {
      const childPath = path ? `${path}.${key}` : key;
      const known = schema.properties?.[key];
      if (known) problems.push(...validate(known, child, childPath));
      else if (typeof schema.additionalProperties === 'object') {
        problems.push(...validate(schema.additionalProperties, child, childPath));
      } else if (
        schema.properties &&
        !schema['x-kubernetes-preserve-unknown-fields'] &&
        schema.additionalProperties !== true
      ) {
        problems.push(`${childPath}: unknown field`);
      }
    }
  }
  return problems;
}
