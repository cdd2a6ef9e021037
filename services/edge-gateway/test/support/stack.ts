// The data path as real processes: an inference backend (tinystories-656k, CPU engine), the
// router in front of it, and edge replicas in front of that. Every JSON log line of every
// process is kept, by process name, so tests can follow one request through the hops.
import {
  type ServiceProcess,
  serviceEntry,
  startLoggedServiceProcess,
  testModelDir,
  waitReady,
} from '@strata/common/testing';

export class Stack {
  readonly logs = new Map<string, Record<string, unknown>[]>();
  private readonly processes: ServiceProcess[] = [];

  async start(name: string, pkg: string, env: Record<string, string>): Promise<ServiceProcess> {
    const proc = await startLoggedServiceProcess(name, serviceEntry(pkg, import.meta.url), { env });
    this.logs.set(name, proc.logs);
    this.processes.push(proc);
    return proc;
  }

  /**
   * A ready backend behind a router; `env` is added to both (identity keys and mode), `backendEnv`
   * to the backend only.
   */
  async backendAndRouter(
    env: Record<string, string> = {},
    backendEnv: Record<string, string> = {},
  ): Promise<{ backend: ServiceProcess; router: ServiceProcess }> {
    const backend = await this.start('backend', '@strata/inference-backend', {
      STRATA_MODEL_DIR: testModelDir(),
      STRATA_KV_CACHE_BLOCKS: '256',
      STRATA_ENGINE_THREADS: '1',
      STRATA_WARMUP: 'false',
      ...env,
      ...backendEnv,
    });
    const router = await this.start('router', '@strata/router-service', {
      STRATA_BACKEND_URL: backend.url,
      ...env,
    });
    await waitReady(backend.url);
    return { backend, router };
  }

  /** Waits until the router has seen the backend ready: a GET /v1/models through `edgeUrl` answers 200. */
  async waitServed(edgeUrl: string, headers: Record<string, string>, timeoutMs = 15_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const res = await fetch(`${edgeUrl}/v1/models`, { headers });
      await res.arrayBuffer();
      if (res.status === 200) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`no request served through ${edgeUrl} within ${timeoutMs} ms`);
  }

  /** Processes that exited on their own (crashed), by name. */
  crashed(): string[] {
    return this.processes
      .filter((p) => p.child.exitCode !== null || p.child.signalCode !== null)
      .map((p) => p.name);
  }

  async stop(): Promise<void> {
    await Promise.all(this.processes.map((p) => p.stop('SIGKILL')));
  }
}

/** The value of one series (summed over matching label sets) in a service's /metrics. */
export async function scrape(
  url: string,
  name: string,
  labels: Record<string, string> = {},
): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`)))
      sum += Number(line.split(' ').pop());
  }
  return sum;
}
