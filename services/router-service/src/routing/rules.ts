// The routing file: pools of backends and an ORDERED list of rules that send a request to a
// pool with a policy (scorer weights and saturation limits). Validated once with zod when it
// is loaded; matchRule then trusts it. The first rule whose every condition holds wins, and
// the `default` rule catches the rest, so the same request always gets the same rule.
import { ConfigError } from '@strata/common';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { SCORERS, type ScorerName } from './scorers/index.js';

const weight = z.number().min(0);

const rangeSchema = z
  .object({ min: z.number().optional(), max: z.number().optional() })
  .strict()
  .refine((r) => r.min === undefined || r.max === undefined || r.min <= r.max, 'min must be <= max');

/** A condition on a string field: one value or any of several. */
const oneOrMany = z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]);

const matchSchema = z
  .object({
    model: oneOrMany.optional(),
    tenant: oneOrMany.optional(),
    /** Exact header values; names are case-insensitive (lower-cased here). */
    headers: z
      .record(z.string().min(1), z.string())
      .transform((h) => Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toLowerCase(), v])))
      .optional(),
    priority: rangeSchema.optional(),
    /** Prompt length in characters, inclusive bounds. */
    promptChars: rangeSchema.optional(),
  })
  .strict();

/** One weight per scorer (scorers/index.ts), by its name; a weight left out is the scorer's default. */
const weightsSchema = z
  .object(
    Object.fromEntries(SCORERS.map((s) => [s.name, weight.default(s.defaultWeight)])) as Record<
      ScorerName,
      z.ZodDefault<z.ZodNumber>
    >,
  )
  .strict()
  .prefault({})
  .refine((w) => Object.values(w).reduce((sum, x) => sum + x, 0) > 0, 'at least one weight must be > 0');

const policySchema = z
  .object({
    weights: weightsSchema,
    saturation: z
      .object({
        /** A backend with more waiting requests than this is saturated. */
        maxWaiting: z.number().int().min(0).default(32),
        /** A backend whose KV cache is fuller than this fraction (0..1) is saturated. */
        maxKvUsage: z.number().min(0).max(1).default(0.9),
      })
      .strict()
      .prefault({}),
  })
  .strict();

const backendSchema = z.object({ name: z.string().min(1), url: z.url() }).strict();

/** A DNS-1123 label: what Kubernetes allows for Service names, namespaces and port names. */
const dnsLabel = z
  .string()
  .regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, 'must be a lower-case DNS label (a-z, 0-9, -)');

/** A Kubernetes Service whose ready endpoints (EndpointSlices) join the pool. */
const discoverySchema = z
  .object({
    service: dnsLabel,
    namespace: dnsLabel.default('default'),
    /** The Service port's name (resolved from each EndpointSlice), or the pod's port number. */
    port: z.union([dnsLabel, z.number().int().min(1).max(65535)]),
  })
  .strict();

const poolSchema = z
  .object({
    backends: z.array(backendSchema).default([]),
    discovery: discoverySchema.optional(),
  })
  .strict();

const ruleSchema = z
  .object({
    name: z.string().min(1),
    match: matchSchema.default({}),
    pool: z.string().min(1),
    policy: policySchema.prefault({}),
  })
  .strict();

const defaultRuleSchema = ruleSchema.omit({ name: true, match: true });

export const routingFileSchema = z
  .object({
    /** Per pool: static backends (local runs) and/or a Kubernetes Service to discover. */
    pools: z.record(z.string().min(1), poolSchema),
    rules: z.array(ruleSchema).default([]),
    default: defaultRuleSchema,
  })
  .strict();

export type RoutingFile = z.output<typeof routingFileSchema>;
export type Rule = z.output<typeof ruleSchema>;
export type RuleMatch = Rule['match'];
export type Policy = Rule['policy'];
export type Weights = Policy['weights'];
export type Saturation = Policy['saturation'];
export type StaticBackend = z.output<typeof backendSchema>;
export type PoolDiscovery = z.output<typeof discoverySchema>;

export const DEFAULT_RULE_NAME = 'default';

export interface RoutingConfig {
  pools: RoutingFile['pools'];
  /** The file's rules in order, then the default rule (name "default", matches everything). */
  rules: Rule[];
}

/** What a rule can look at; headers are Node's lower-cased incoming headers. */
export interface RouteRequest {
  model?: string;
  tenant?: string;
  headers: Readonly<Record<string, string | string[] | undefined>>;
  priority?: number;
  promptChars: number;
}

function crossCheck(file: RoutingFile): string[] {
  const problems: string[] = [];
  for (const [pool, { backends }] of Object.entries(file.pools)) {
    const seen = new Set<string>();
    backends.forEach((b, i) => {
      if (seen.has(b.name)) problems.push(`pools.${pool}.backends.${i}.name: duplicate backend "${b.name}"`);
      seen.add(b.name);
    });
  }
  const names = new Set<string>([DEFAULT_RULE_NAME]);
  file.rules.forEach((rule, i) => {
    if (names.has(rule.name)) {
      problems.push(
        rule.name === DEFAULT_RULE_NAME
          ? `rules.${i}.name: "${DEFAULT_RULE_NAME}" is reserved for the default rule`
          : `rules.${i}.name: duplicate rule name "${rule.name}"`,
      );
    }
    names.add(rule.name);
    if (!(rule.pool in file.pools)) problems.push(`rules.${i}.pool: unknown pool "${rule.pool}"`);
  });
  if (!(file.default.pool in file.pools)) problems.push(`default.pool: unknown pool "${file.default.pool}"`);
  return problems;
}

/** Validates a parsed routing document; throws ONE ConfigError listing every problem. */
export function parseRoutingConfig(doc: unknown, source: string): RoutingConfig {
  const result = routingFileSchema.safeParse(doc);
  if (!result.success) {
    throw new ConfigError(
      source,
      result.error.issues.map((issue) => `${issue.path.map(String).join('.') || '(root)'}: ${issue.message}`),
    );
  }
  const problems = crossCheck(result.data);
  if (problems.length > 0) throw new ConfigError(source, problems);
  const { pools, rules, default: fallback } = result.data;
  return { pools, rules: [...rules, { name: DEFAULT_RULE_NAME, match: {}, ...fallback }] };
}

/** Parses YAML text of a routing file; throws ConfigError on bad YAML or a bad document. */
export function parseRoutingYaml(text: string, source: string): RoutingConfig {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new ConfigError(source, [`not valid YAML: ${(err as Error).message}`]);
  }
  return parseRoutingConfig(doc ?? {}, source);
}

function inRange(value: number | undefined, range: { min?: number; max?: number } | undefined): boolean {
  if (range === undefined) return true;
  // A range condition never matches a request that lacks the value.
  if (value === undefined) return false;
  return (range.min === undefined || value >= range.min) && (range.max === undefined || value <= range.max);
}

function oneOf(value: string | undefined, wanted: string | string[] | undefined): boolean {
  if (wanted === undefined) return true;
  if (value === undefined) return false;
  return typeof wanted === 'string' ? value === wanted : wanted.includes(value);
}

function headersMatch(actual: RouteRequest['headers'], wanted: Record<string, string> | undefined): boolean {
  if (wanted === undefined) return true;
  for (const [name, value] of Object.entries(wanted)) {
    const got = actual[name];
    if (Array.isArray(got) ? !got.includes(value) : got !== value) return false;
  }
  return true;
}

export function ruleMatches(match: RuleMatch, request: RouteRequest): boolean {
  return (
    oneOf(request.model, match.model) &&
    oneOf(request.tenant, match.tenant) &&
    headersMatch(request.headers, match.headers) &&
    inRange(request.priority, match.priority) &&
    inRange(request.promptChars, match.promptChars)
  );
}

/** The first rule that matches; the config always ends with the catch-all default rule. */
export function matchRule(rules: readonly Rule[], request: RouteRequest): Rule {
  for (const rule of rules) if (ruleMatches(rule.match, request)) return rule;
  throw new Error('routing rules must end with the default rule');
}
