import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createLogger, createMetrics, type LoadReport, loadConfig, Readiness } from '@strata/common';
import { afterEach, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { CONFIG_FILE_ENV, configEnv, configSchema } from '../src/config.js';
import { dcgmExporterLike, OTHER_POD, THIS_POD } from './support/dcgm-exporter.js';

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

// A real HTTP server answering /load and /metrics the way a backend does, with values the test
// sets; the sidecar polls it over TCP.
async function backendLike(load: LoadReport, preemptions: () => number) {
  const server = createServer((req, res) => {
    if (req.url === '/load') {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify(load));
    } else if (req.url === '/metrics') {
      res.end(`vllm:num_preemptions_total{model_name="${load.model}"} ${preemptions()}\n`);
    } else res.writeHead(404).end();
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

function sidecarApp(env: Record<string, string>) {
  const config = loadConfig({ schema: configSchema, envMap: configEnv, env });
  const logger = createLogger({ service: 'observability', level: 'silent' });
  const readiness = new Readiness();
  const app = buildApp(
    { config, logger, metrics: createMetrics('observability'), readiness },
    { poll: false },
  );
  return { app, readiness };
}

const LOAD: LoadReport = {
  model: 'tiny',
  ready: true,
  running: 2,
  waiting: 3,
  live_requests: 5,
  kv_usage: 0.5,
  kv_blocks_free: 10,
  kv_blocks_total: 20,
  timestamp_ms: 1,
};

describe('observability app', () => {
  it('defaults to port 9400 and the backend on 127.0.0.1:8000, and reads STRATA_OBSERVABILITY_CONFIG', () => {
    const config = loadConfig({ schema: configSchema, envMap: configEnv, env: {} });
    expect(config.port).toBe(9400);
    expect(config.backendUrl).toBe('http://127.0.0.1:8000');
    expect(config.diagnosis).toEqual({
      kvHighRatio: 0.9,
      gpuBusyRatio: 0.9,
      preemptionWindowMs: 10_000,
      confirmSamples: 3,
    });
    expect(CONFIG_FILE_ENV).toBe('STRATA_OBSERVABILITY_CONFIG');
  });

  it('is live, ready until draining, and labels its metrics', async () => {
    const { app, readiness } = sidecarApp({ STRATA_BACKEND_URL: 'http://127.0.0.1:9' });
    expect((await app.inject('/health/live')).statusCode).toBe(200);
    expect((await app.inject('/health/ready')).statusCode).toBe(200);
    readiness.startDraining();
    expect((await app.inject('/health/ready')).json()).toMatchObject({ ready: false, draining: true });
    expect((await app.inject('/metrics')).body).toContain('service="observability"');
    await app.close();
  });

  it('exports the backend state and the diagnosis, then keeps them and says so when the backend goes', async () => {
    const preemptions = 0;
    const backend = await backendLike(LOAD, () => preemptions);
    const { app } = sidecarApp({ STRATA_BACKEND_URL: backend.url, STRATA_SIDECAR_CONFIRM_SAMPLES: '1' });
    await app.sidecar.pollBackend();
    let text = (await app.inject('/metrics')).body;
    expect(text).toContain('strata_sidecar_backend_up{service="observability"} 1');
    expect(text).toContain(
      'strata_saturation_state{state="queueing",model_name="tiny",service="observability"} 1',
    );
    expect(text).toContain(
      'strata_saturation_state{state="idle",model_name="tiny",service="observability"} 0',
    );
    expect(text).toContain(
      'strata_saturation_input_requests_waiting{model_name="tiny",service="observability"} 3',
    );
    expect(text).toContain(
      'strata_sidecar_backend_kv_blocks_free{model_name="tiny",service="observability"} 10',
    );

    await new Promise((r) => backend.server.close(r));
    backend.server.closeAllConnections();
    await app.sidecar.pollBackend();
    text = (await app.inject('/metrics')).body;
    expect(text).toContain('strata_sidecar_backend_up{service="observability"} 0');
    expect(text).toMatch(
      /strata_sidecar_scrape_errors_total\{source="backend_load",service="observability"\} 1/,
    );
    // Last good values stay, with their age.
    expect(text).toContain(
      'strata_saturation_input_requests_waiting{model_name="tiny",service="observability"} 3',
    );
    expect(text).toMatch(/strata_sidecar_backend_stats_age_seconds\{service="observability"\} \d/);
    const ready = (await app.inject('/health/ready')).json();
    expect(ready.ready).toBe(true);
    expect(ready.checks.backend.detail).toMatch(/serving last values/);
    const status = (await app.inject('/status')).json();
    expect(status.backend).toMatchObject({ up: false, load: { waiting: 3 } });
    expect(status.backend.error).toEqual(expect.any(String));
    expect(status.saturation.state).toBe('queueing');
    await app.close();
  });

  it("diagnoses from this pod's GPU in dcgm-exporter's answer and says so in /status and readiness", async () => {
    const dcgm = await dcgmExporterLike();
    servers.push(dcgm.server);
    const backend = await backendLike({ ...LOAD, waiting: 0 }, () => 0);
    const env = {
      STRATA_BACKEND_URL: backend.url,
      STRATA_SIDECAR_CONFIRM_SAMPLES: '1',
      STRATA_DCGM_URL: dcgm.url,
      STRATA_SIDECAR_NVIDIA_SMI: 'nvidia-smi-not-installed-here',
    };
    // This pod's GPU is at 97 %: compute saturated. The other pod's GPU (12 %) must not count.
    const mine = sidecarApp({
      ...env,
      STRATA_POD_NAME: THIS_POD.name,
      STRATA_POD_NAMESPACE: THIS_POD.namespace,
    });
    await mine.app.sidecar.pollGpu();
    await mine.app.sidecar.pollBackend();
    expect(mine.app.sidecar.diagnoser.inputs?.gpuUtil).toBe(0.97);
    expect(mine.app.sidecar.diagnoser.state).toBe('compute_saturated');
    const status = (await mine.app.inject('/status')).json();
    expect(status.gpu).toMatchObject({ mode: 'gpu', source: 'dcgm', up: true, gpus: 1, error: null });
    expect(status.gpu.dcgm).toMatchObject({ url: dcgm.url, error: null });
    expect(status.gpu.devices[0]).toMatchObject({
      index: 0,
      smActiveRatio: 0.812345,
      dramActiveRatio: 0.734512,
    });
    const ready = (await mine.app.inject('/health/ready')).json();
    expect(ready.checks.gpu.detail).toBe('gpu (dcgm)');
    await mine.app.close();

    const other = sidecarApp({
      ...env,
      STRATA_POD_NAME: OTHER_POD.name,
      STRATA_POD_NAMESPACE: OTHER_POD.namespace,
    });
    await other.app.sidecar.pollGpu();
    await other.app.sidecar.pollBackend();
    expect(other.app.sidecar.diagnoser.inputs?.gpuUtil).toBe(0.12);
    expect(other.app.sidecar.diagnoser.state).toBe('healthy');
    await other.app.close();
  });

  it('reads preemptions from /metrics into memory_pressure', async () => {
    let preemptions = 5;
    const backend = await backendLike({ ...LOAD, waiting: 0 }, () => preemptions);
    const { app } = sidecarApp({ STRATA_BACKEND_URL: backend.url, STRATA_SIDECAR_CONFIRM_SAMPLES: '1' });
    await app.sidecar.pollBackend();
    expect(app.sidecar.diagnoser.state).toBe('healthy');
    preemptions = 7;
    // /metrics is read at most once a second: poll until the new total is seen.
    while (app.sidecar.diagnoser.state !== 'memory_pressure') {
      await new Promise((r) => setTimeout(r, 100));
      await app.sidecar.pollBackend();
    }
    expect(app.sidecar.diagnoser.inputs?.recentPreemptions).toBe(2);
    await app.close();
  });
});
