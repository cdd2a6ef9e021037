// The files the harness writes into its temporary folder: the router's routing file (both
// backends in one pool), the edge's tenants file with a generated API key, and Prometheus'
// scrape configuration.
import { createHash, randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface NamedUrl {
  name: string;
  url: string;
}

export function writeRoutesFile(dir: string, backends: NamedUrl[]): string {
  const file = join(dir, 'routes.yaml');
  const list = backends.map((b) => `      - { name: ${b.name}, url: "${b.url}" }`).join('\n');
  writeFileSync(file, `pools:\n  cpu:\n    backends:\n${list}\nrules: []\ndefault: { pool: cpu }\n`);
  return file;
}

export interface Tenant {
  name: string;
  apiKey: string;
}

/**
 * One tenant with a fresh API key. Its quotas are far above what two CPU backends serve, so
 * load runs measure the platform rather than the quota (the edge's own limits still apply to
 * tenants a test writes itself).
 */
export function writeTenantsFile(
  dir: string,
  limits: { requestsPerMinute: number; tokensPerMinute: number },
): { file: string; tenant: Tenant } {
  const apiKey = `sk-strata-load-${randomBytes(16).toString('hex')}`;
  const hash = createHash('sha256').update(apiKey).digest('hex');
  const file = join(dir, 'tenants.yaml');
  writeFileSync(
    file,
    [
      'tenants:',
      '  - name: load-test',
      `    keys: ["sha256:${hash}"]`,
      `    requests_per_minute: ${limits.requestsPerMinute}`,
      `    tokens_per_minute: ${limits.tokensPerMinute}`,
      '',
    ].join('\n'),
  );
  return { file, tenant: { name: 'load-test', apiKey } };
}

/** Scrapes every service every second: load runs are short. */
export function writePrometheusConfig(dir: string, jobs: Record<string, NamedUrl[]>): string {
  const file = join(dir, 'prometheus.yml');
  const scrape = Object.entries(jobs).map(([job, targets]) =>
    [
      `  - job_name: ${job}`,
      '    static_configs:',
      ...targets.map(
        (t) => `      - targets: ["${new URL(t.url).host}"]\n        labels: { instance_name: ${t.name} }`,
      ),
    ].join('\n'),
  );
  writeFileSync(
    file,
    ['global:', '  scrape_interval: 1s', '  evaluation_interval: 1s', 'scrape_configs:', ...scrape, ''].join(
      '\n',
    ),
  );
  return file;
}
