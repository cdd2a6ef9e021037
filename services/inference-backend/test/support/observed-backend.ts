// A real backend (tinystories-656k, port 0) whose log lines are kept for assertions, with
// warmup off so every engine request in it is one the test sent. The model loads only when
// the test calls start(), so the moments before it are observable too.
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { createLogger, createMetrics, loadConfig, Readiness } from '@strata/common';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.js';
import { type Config, configEnv, configSchema } from '../../src/config.js';
import { ModelHost } from '../../src/inference/model-host.js';
import { loadNativeAddon } from '../../src/native.js';
import { modelPath } from './models.js';

export interface ObservedBackend {
  app: FastifyInstance;
  host: ModelHost;
  config: Config;
  url: string;
  /** Every JSON log line written so far, parsed. */
  logs: Record<string, unknown>[];
  /** GET /metrics, parsed. */
  scrape(): Promise<Sample[]>;
  start(): Promise<void>;
  close(): Promise<void>;
}

export async function startObservedBackend(env: Record<string, string> = {}): Promise<ObservedBackend> {
  const config = loadConfig({
    schema: configSchema,
    envMap: configEnv,
    env: {
      STRATA_MODEL_DIR: modelPath('tinystories-656k'),
      STRATA_KV_CACHE_BLOCKS: '512',
      STRATA_WARMUP: 'false',
      ...env,
    },
  });
  const logs: Record<string, unknown>[] = [];
  let partial = '';
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      const lines = (partial + chunk.toString('utf8')).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) if (line !== '') logs.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  const logger = createLogger({ service: 'inference-backend', level: 'info', destination: sink });
  const metrics = createMetrics('inference-backend');
  const readiness = new Readiness();
  const host = new ModelHost(config, readiness, logger);
  const app = buildApp({ config, logger, metrics, readiness }, { addon: loadNativeAddon(), host });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as AddressInfo;
  let started: Promise<void> | undefined;
  const url = `http://127.0.0.1:${port}`;
  return {
    app,
    host,
    config,
    url,
    logs,
    scrape: async () => parseMetrics(await (await fetch(`${url}/metrics`)).text()),
    start: () => {
      started ??= host.start();
      return started;
    },
    close: async () => {
      await started;
      await app.close();
      await host.close();
    },
  };
}

/** The labels of the series for the model the observed backend serves. */
export const MODEL_LABELS = { model_name: 'tinystories-656k' };

/** The vllm:* series that count client requests (the start-up warmup must leave them at 0). */
export const REQUEST_SERIES = [
  'vllm:prompt_tokens_total',
  'vllm:generation_tokens_total',
  'vllm:prefix_cache_queries_total',
  'vllm:prefix_cache_hits_total',
  'vllm:time_to_first_token_seconds_count',
  'vllm:inter_token_latency_seconds_count',
  'vllm:e2e_request_latency_seconds_count',
  'vllm:request_queue_time_seconds_count',
  'vllm:request_prefill_time_seconds_count',
  'vllm:request_decode_time_seconds_count',
  'vllm:iteration_tokens_total_count',
];

/** Every vllm:* series of the model: the engine's gauges, its preemptions and the request series. */
export const VLLM_SERIES = [
  'vllm:num_requests_running',
  'vllm:num_requests_waiting',
  'vllm:kv_cache_usage_perc',
  'vllm:num_preemptions_total',
  ...REQUEST_SERIES,
];

/** Prometheus text exposition as samples: name, labels, value. */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export function parseMetrics(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`unparsed metrics line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[l[1] as string] = l[2] as string;
    }
    samples.push({ name: m[1] as string, labels, value: Number(m[3]) });
  }
  return samples;
}

/** The one sample with this name whose labels include `labels`; throws unless exactly one. */
export function sample(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  const found = samples.filter(
    (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  );
  if (found.length !== 1) throw new Error(`${found.length} samples for ${name} ${JSON.stringify(labels)}`);
  return (found[0] as Sample).value;
}
