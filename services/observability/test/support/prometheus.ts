// A real Prometheus (Debian's package) for tests: started on a free port with a generated
// config (1 s scrape and rule evaluation), the package's rule files loaded, storage in a temp
// directory removed on stop.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface ScrapeJob {
  job: string;
  /** host:port of each target. */
  targets: string[];
}

export interface PromSample {
  metric: Record<string, string>;
  value: [number, string];
}

export interface Prometheus {
  url: string;
  /** Instant query; throws on a query error (bad syntax, unknown function). */
  query(expr: string): Promise<PromSample[]>;
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  await new Promise((r) => server.close(r));
  return port;
}

function config(jobs: ScrapeJob[], ruleFiles: string[]): string {
  // JSON is YAML: no YAML library needed to write it.
  return JSON.stringify({
    global: { scrape_interval: '1s', scrape_timeout: '900ms', evaluation_interval: '1s' },
    rule_files: ruleFiles,
    scrape_configs: jobs.map((j) => ({ job_name: j.job, static_configs: [{ targets: j.targets }] })),
  });
}

export async function startPrometheus(jobs: ScrapeJob[], ruleFiles: string[]): Promise<Prometheus> {
  const dir = mkdtempSync(join(tmpdir(), 'strata-prometheus-'));
  writeFileSync(join(dir, 'prometheus.yml'), config(jobs, ruleFiles));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const output: string[] = [];
  const child: ChildProcess = spawn(
    'prometheus',
    [
      `--config.file=${join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--web.enable-lifecycle',
      '--log.level=warn',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  child.stdout?.on('data', (d) => output.push(String(d)));
  child.stderr?.on('data', (d) => output.push(String(d)));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`prometheus exited (${child.exitCode}): ${output.join('')}`);
    const ready = await fetch(`${url}/-/ready`).then(
      (r) => r.ok,
      () => false,
    );
    if (ready) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`prometheus not ready within 60 s: ${output.join('')}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return {
    url,
    async query(expr: string) {
      const response = await fetch(`${url}/api/v1/query`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ query: expr }),
      });
      const body = (await response.json()) as {
        status: string;
        error?: string;
        data?: { resultType: string; result: PromSample[] | [number, string] };
      };
      if (body.status !== 'success' || !body.data) throw new Error(`query failed: ${expr}: ${body.error}`);
      // A scalar result is one sample without labels.
      if (body.data.resultType === 'scalar')
        return [{ metric: {}, value: body.data.result as [number, string] }];
      return body.data.result as PromSample[];
    },
    stop,
  };
}

/** Polls `check` until it holds; throws `what` after timeoutMs. */
export async function waitFor(
  what: string,
  check: () => Promise<boolean>,
  timeoutMs = 120_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}
