// One HTTP worker thread of STRATA_HTTP_WORKERS (inference/http-workers.ts): the same app as the
// main thread's, on an engine attached to the one the main thread loaded, listening on the same
// port (SO_REUSEPORT). Request metrics go to the main thread; logs carry http_worker.
import { parentPort, workerData } from 'node:worker_threads';
import {
  applyHttpLimits,
  createLogger,
  createMetrics,
  drainServer,
  hideMetricsRoute,
  Readiness,
  startTelemetry,
} from '@strata/common';
import type { FastifyListenOptions } from 'fastify';
import { buildApp } from '../app.js';
import { loadNativeAddon } from '../native.js';
import { clockOffsetMs, type FromWorker, type HttpWorkerData, type ToWorker } from './http-workers.js';
import { ModelHost } from './model-host.js';

const port = parentPort;
if (port === null) throw new Error('http-worker runs as a worker thread only');
const data = workerData as HttpWorkerData;
const { config } = data;
const send = (message: FromWorker) => port.postMessage(message);

const logger = createLogger({ service: 'inference-backend', level: config.logLevel }).child({
  http_worker: data.index,
});
// Process-wide series (CPU, memory, event loop of the main thread) come from the main thread.
const metrics = createMetrics('inference-backend', { defaultMetrics: false });
const readiness = new Readiness();
const telemetry = startTelemetry({ serviceName: 'inference-backend', endpoint: config.otlpEndpoint });
const host = new ModelHost(
  config,
  readiness,
  logger,
  {
    finished: (record) => send({ type: 'finished', record }),
    rejected: (code) => send({ type: 'rejected', code }),
  },
  telemetry.tracer,
  data.shared,
);

// GET /metrics here answers what the main thread sums from every loop.
const texts = new Map<number, (text: string) => void>();
let nextText = 1;
metrics.exposition = () =>
  new Promise((resolve) => {
    const id = nextText++;
    texts.set(id, resolve);
    send({ type: 'metrics-text', id });
  });

const app = buildApp(
  { config, logger, metrics, readiness },
  { addon: loadNativeAddon(), host, worker: true },
);
applyHttpLimits(app, config.http);
if (config.metricsPort !== undefined) hideMetricsRoute(app);

/** Stops accepting, lets this loop's streams finish (up to the drain deadline), detaches. */
async function drain(): Promise<void> {
  readiness.startDraining();
  const outcome = await drainServer(app, config.drainTimeoutMs);
  await host.close();
  await telemetry.shutdown();
  send({ type: 'drained', outcome });
  port?.close();
}

port.on('message', (message: ToWorker) => {
  switch (message.type) {
    case 'metrics-json':
      void metrics.registry
        .getMetricsAsJSON()
        .then((json) => send({ type: 'metrics-json', id: message.id, json }));
      break;
    case 'metrics-text':
      texts.get(message.id)?.(message.text);
      texts.delete(message.id);
      break;
    case 'drain':
      if (!readiness.draining) void drain();
      break;
  }
});

try {
  await host.start();
  // As the main thread's (RunOptions.reusePort): net.Server.listen takes reusePort.
  const address = await app.listen({
    host: data.host,
    port: data.port,
    reusePort: true,
  } as FastifyListenOptions);
  send({ type: 'listening', address, clockOffsetMs: clockOffsetMs() });
} catch (err) {
  logger.error({ err }, 'http worker failed to start');
  send({ type: 'failed', message: (err as Error).message });
  await host.close();
  port.close();
}
