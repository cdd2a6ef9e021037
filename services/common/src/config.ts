// Configuration is read once at start-up from a YAML file and the environment, validated with
// zod, and trusted afterwards. A bad configuration fails with ONE error naming every bad field.
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';

export class ConfigError extends Error {
  readonly problems: string[];

  constructor(source: string, problems: string[]) {
    super(
      `invalid configuration (${source}): ${problems.length} problem${problems.length === 1 ? '' : 's'}\n` +
        problems.map((p) => `  - ${p}`).join('\n'),
    );
    this.name = 'ConfigError';
    this.problems = problems;
  }
}

/** Maps a dotted config path (e.g. "server.port") to the environment variable that overrides it. */
export type EnvMap = Record<string, string>;

export interface LoadConfigOptions<S extends z.ZodType> {
  schema: S;
  /** Environment variables that override file values, by dotted config path. */
  envMap?: EnvMap;
  /** YAML file to read first; when absent, the variable named by fileEnv is consulted. */
  file?: string;
  /** Environment variable holding the YAML file path, e.g. STRATA_ROUTER_CONFIG. */
  fileEnv?: string;
  env?: NodeJS.ProcessEnv;
}

function setPath(target: Record<string, unknown>, path: string, value: unknown): void {
  const keys = path.split('.');
  let node = target;
  for (const key of keys.slice(0, -1)) {
    const next = node[key];
    if (typeof next !== 'object' || next === null || Array.isArray(next)) node[key] = {};
    node = node[key] as Record<string, unknown>;
  }
  node[keys[keys.length - 1] as string] = value;
}

function readYamlFile(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(file, [`cannot read the file: ${(err as Error).message}`]);
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new ConfigError(file, [`not valid YAML: ${(err as Error).message}`]);
  }
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== 'object' || Array.isArray(doc)) {
    throw new ConfigError(file, ['the top level must be a mapping of keys to values']);
  }
  return doc as Record<string, unknown>;
}

function describeIssue(issue: z.core.$ZodIssue, envMap: EnvMap): string {
  const path = issue.path.map(String).join('.');
  const envName = envMap[path];
  const where = path === '' ? '(root)' : envName ? `${path} (env ${envName})` : path;
  return `${where}: ${issue.message}`;
}

export function loadConfig<S extends z.ZodType>(options: LoadConfigOptions<S>): z.output<S> {
  const env = options.env ?? process.env;
  const envMap = options.envMap ?? {};
  const file = options.file ?? (options.fileEnv ? env[options.fileEnv] : undefined);
  const raw: Record<string, unknown> = file ? readYamlFile(file) : {};
  for (const [path, name] of Object.entries(envMap)) {
    const value = env[name];
    if (value !== undefined && value !== '') setPath(raw, path, value);
  }
  const result = options.schema.safeParse(raw);
  if (!result.success) {
    const source = [file ? `file ${file}` : null, 'environment'].filter(Boolean).join(' + ');
    throw new ConfigError(
      source,
      result.error.issues.map((issue) => describeIssue(issue, envMap)),
    );
  }
  return result.data;
}

/** Environment strings arrive as text: these accept both the YAML value and its string form. */
export const configFields = {
  port: (fallback: number) => z.coerce.number().int().min(0).max(65535).default(fallback),
  positiveInt: (fallback: number) => z.coerce.number().int().positive().default(fallback),
  boolean: (fallback: boolean) =>
    z
      .union([z.boolean(), z.enum(['true', 'false', '1', '0'])])
      .transform((v) => v === true || v === 'true' || v === '1')
      .default(fallback),
  logLevel: () => z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
};

/**
 * Limits on what a client may send, enforced by the service base (request-guards.ts) on every
 * service. The timeouts mirror Envoy's in the chart (helm/strata values.yaml, envoy.*): request
 * headers 10 s, whole request 30 s. They cover receiving the request only, never the response,
 * so a long SSE stream is not cut.
 */
export const httpLimitsSchema = z
  .object({
    /** Deepest nesting of objects and arrays accepted in a JSON body (400 STRATA_BODY_TOO_DEEP). */
    maxJsonDepth: z.coerce.number().int().positive().max(1024).default(128),
    /** A request's headers must arrive within this many ms of its first byte (408 otherwise). */
    headersTimeoutMs: configFields.positiveInt(10_000),
    /** The whole request, headers and body, must arrive within this many ms (408 otherwise). */
    requestTimeoutMs: configFields.positiveInt(30_000),
    /**
     * An idle keep-alive connection is closed after this many ms. Above Envoy's upstream idle
     * timeout (60 s), so Envoy never reuses a connection the edge is closing.
     */
    keepAliveTimeoutMs: configFields.positiveInt(72_000),
  })
  .refine((limits) => limits.headersTimeoutMs <= limits.requestTimeoutMs, {
    path: ['headersTimeoutMs'],
    message: 'must not exceed requestTimeoutMs (the whole request includes its headers)',
  });

export type HttpLimits = z.output<typeof httpLimitsSchema>;

export const DEFAULT_HTTP_LIMITS: HttpLimits = Object.freeze(httpLimitsSchema.parse({}));

/** The settings every Strata service shares; services extend this schema with their own. */
export const baseServiceSchema = z.object({
  host: z.string().min(1).default('0.0.0.0'),
  port: configFields.port(0),
  /**
   * Serve /metrics on this port instead of the API's (0: a free one), so a NetworkPolicy can open
   * it to Prometheus alone; unset: /metrics is on the API port.
   */
  metricsPort: z.coerce.number().int().min(0).max(65535).optional(),
  logLevel: configFields.logLevel(),
  /** How long SIGTERM waits for in-flight requests before closing them, in milliseconds. */
  drainTimeoutMs: configFields.positiveInt(30_000),
  otlpEndpoint: z.url().optional(),
  http: httpLimitsSchema.prefault({}),
});

export type BaseServiceConfig = z.output<typeof baseServiceSchema>;

export const baseServiceEnv: EnvMap = {
  host: 'HOST',
  port: 'PORT',
  metricsPort: 'STRATA_METRICS_PORT',
  logLevel: 'LOG_LEVEL',
  drainTimeoutMs: 'STRATA_DRAIN_TIMEOUT_MS',
  otlpEndpoint: 'OTEL_EXPORTER_OTLP_ENDPOINT',
  'http.maxJsonDepth': 'STRATA_MAX_JSON_DEPTH',
  'http.headersTimeoutMs': 'STRATA_HTTP_HEADERS_TIMEOUT_MS',
  'http.requestTimeoutMs': 'STRATA_HTTP_REQUEST_TIMEOUT_MS',
  'http.keepAliveTimeoutMs': 'STRATA_HTTP_KEEP_ALIVE_TIMEOUT_MS',
};
