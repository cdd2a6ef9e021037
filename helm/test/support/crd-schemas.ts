// JSON schemas for the custom resources the chart renders (ServiceMonitor, PodMonitor,
// PrometheusRule, ScaledObject), taken from the CRD files of the prometheus-operator and KEDA
// Go modules (helm/scripts/ensure-tools.sh copies them). The CRDs' openAPIV3Schema is made
// strict the way the API server treats structural schemas: a field that is not declared
// would be pruned, so here it is an error.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { parse } from 'yaml';
import { crdDir } from './tools.js';

type Schema = Record<string, unknown>;

function strict(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(strict);
  if (schema === null || typeof schema !== 'object') return schema;
  const out: Schema = {};
  for (const [k, v] of Object.entries(schema)) out[k] = strict(v);
  if (out.nullable === true && typeof out.type === 'string') out.type = [out.type, 'null'];
  if (out['x-kubernetes-int-or-string'] === true) {
    delete out.type;
    out.anyOf = [{ type: 'integer' }, { type: 'string' }];
  }
  if (
    out.properties &&
    out.additionalProperties === undefined &&
    !out['x-kubernetes-preserve-unknown-fields']
  ) {
    out.additionalProperties = false;
  }
  return out;
}

// CRD patterns are Go RE2; the only RE2-only syntax in these CRDs is the (?i) flag, e.g.
// "^(?i)(abort|warn)?$", which becomes JavaScript's i flag.
const goRegExp = Object.assign(
  (pattern: string, flags: string) =>
    pattern.includes('(?i)')
      ? new RegExp(pattern.replaceAll('(?i)', ''), `${flags}i`)
      : new RegExp(pattern, flags),
  { code: 'goRegExp' },
);

export interface CrdValidators {
  /** "group/version kind" -> validator. */
  get(apiVersion: string, kind: string): ValidateFunction | undefined;
  kinds(): string[];
}

export function loadCrdValidators(): CrdValidators {
  const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false, code: { regExp: goRegExp } });
  const map = new Map<string, ValidateFunction>();
  for (const file of readdirSync(crdDir).filter((f) => f.endsWith('.yaml'))) {
    const crd = parse(readFileSync(join(crdDir, file), 'utf8'));
    for (const version of crd.spec.versions) {
      if (!version.served) continue;
      const schema = strict(version.schema.openAPIV3Schema) as Schema;
      map.set(`${crd.spec.group}/${version.name} ${crd.spec.names.kind}`, ajv.compile(schema));
    }
  }
  return {
    get: (apiVersion, kind) => map.get(`${apiVersion} ${kind}`),
    kinds: () => [...map.keys()],
  };
}

export function formatErrors(errors: ErrorObject[] | null | undefined): string {
  return (errors ?? [])
    .map((e) => `${e.instancePath || '/'} ${e.message} ${JSON.stringify(e.params)}`)
    .join('; ');
}
