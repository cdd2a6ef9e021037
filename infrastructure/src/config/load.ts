// Reads the environment's configuration once: a YAML file (path in STRATA_INFRA_CONFIG or given),
// then a few environment overrides, then the zod schema. Any problem ends in ONE InfraConfigError
// that names every bad field, so a typo never synthesizes a half-right cluster.
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import type { z } from 'zod';
import { type InfraConfig, infraConfigSchema } from './schema.js';

export class InfraConfigError extends Error {
  readonly problems: string[];

  constructor(source: string, problems: string[]) {
    super(`invalid infrastructure configuration (${source}):\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'InfraConfigError';
    this.problems = problems;
  }
}

/** Environment variables that override single fields of the file, by top-level key. */
export const ENV_OVERRIDES = {
  region: 'STRATA_INFRA_REGION',
  clusterName: 'STRATA_INFRA_CLUSTER_NAME',
  kubernetesVersion: 'STRATA_INFRA_KUBERNETES_VERSION',
} as const;

export const CONFIG_FILE_ENV = 'STRATA_INFRA_CONFIG';

function readYaml(file: string): unknown {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new InfraConfigError(file, [`cannot read the file: ${(err as Error).message}`]);
  }
  try {
    return parseYaml(text) ?? {};
  } catch (err) {
    throw new InfraConfigError(file, [`not valid YAML: ${(err as Error).message}`]);
  }
}

function describe(issue: z.core.$ZodIssue, fromEnv: ReadonlySet<string>): string {
  const path = issue.path.map(String).join('.');
  const env = fromEnv.has(path) ? ENV_OVERRIDES[path as keyof typeof ENV_OVERRIDES] : undefined;
  return `${path === '' ? '(root)' : path}${env ? ` (env ${env})` : ''}: ${issue.message}`;
}

/** Validates an in-memory document (what the file holds) and fills in derived defaults. */
export function parseInfraConfig(
  doc: unknown,
  source = 'inline',
  fromEnv: ReadonlySet<string> = new Set(),
): InfraConfig {
  const result = infraConfigSchema.safeParse(doc);
  if (!result.success) {
    throw new InfraConfigError(
      source,
      result.error.issues.map((issue) => describe(issue, fromEnv)),
    );
  }
  const config = result.data;
  return {
    ...config,
    network: {
      ...config.network,
      availabilityZones:
        config.network.availabilityZones ?? ['a', 'b', 'c'].map((s) => `${config.region}${s}`),
    },
  };
}

export interface LoadOptions {
  /** YAML file; when absent, $STRATA_INFRA_CONFIG; when that is unset too, defaults only. */
  file?: string;
  env?: NodeJS.ProcessEnv;
}

export function loadInfraConfig(options: LoadOptions = {}): InfraConfig {
  const env = options.env ?? process.env;
  const file = options.file ?? env[CONFIG_FILE_ENV];
  const doc = file ? readYaml(file) : {};
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) {
    throw new InfraConfigError(file ?? 'inline', ['the top level must be a mapping of keys to values']);
  }
  const merged: Record<string, unknown> = { ...doc };
  const fromEnv = new Set<string>();
  for (const [key, name] of Object.entries(ENV_OVERRIDES)) {
    const value = env[name];
    if (value === undefined || value === '') continue;
    merged[key] = value;
    fromEnv.add(key);
  }
  return parseInfraConfig(merged, file ?? 'defaults and environment', fromEnv);
}
