// The router as the service builds it (config from env, routing, tracker, affinity, app), its
// log lines captured, handed over once the tracker has seen the expected backends ready (a probe
// can time out while the machine is busy starting other test files). Not listening: tests call
// app.inject, or app.listen where they need a real server.
import { createMetrics, loadConfig, Readiness } from '@strata/common';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.js';
import { configEnv, configSchema } from '../../src/config.js';
import { buildRouterParts, type RouterParts } from '../../src/wiring.js';
import { captureLogger } from './log.js';

export interface TestRouter {
  app: FastifyInstance;
  parts: RouterParts;
  lines: Array<Record<string, unknown>>;
  close(): Promise<void>;
}

export async function buildTestRouter(
  env: Record<string, string>,
  expectReady: string[],
): Promise<TestRouter> {
  const config = loadConfig({ schema: configSchema, envMap: configEnv, env });
  const { logger, lines } = captureLogger();
  const metrics = createMetrics('router-service', { defaultMetrics: false });
  const parts = await buildRouterParts(config, logger, metrics.registry);
  const app = buildApp({ config, logger, metrics, readiness: new Readiness() }, parts.deps);
  const close = async () => {
    await app.close();
    await parts.close();
  };
  const ready = () =>
    expectReady.every((name) =>
      parts.deps.tracker.snapshot().some((b) => b.name === name && b.ready && b.healthy),
    );
  for (let i = 0; i < 100 && !ready(); i++) {
    await parts.deps.tracker.refresh();
    if (!ready()) await new Promise((r) => setTimeout(r, 50));
  }
  if (!ready()) {
    await close();
    throw new Error(
      `router never saw ${expectReady.join(', ')} ready: ${JSON.stringify(parts.deps.tracker.snapshot())}`,
    );
  }
  return { app, parts, lines, close };
}
