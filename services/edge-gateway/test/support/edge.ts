// An edge-gateway app built from its real configuration path (env -> zod config -> wiring) and
// listening on a free port, for in-process tests.
import { createLogger, createMetrics, loadConfig, Readiness } from '@strata/common';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.js';
import { configEnv, configSchema } from '../../src/config.js';
import { buildEdgeParts } from '../../src/wiring.js';

export interface TestEdge {
  url: string;
  app: FastifyInstance;
  /** The value of one series of /metrics (0 when absent), e.g. metric('strata_edge_rejections_total', {reason: 'auth'}). */
  metric(name: string, labels?: Record<string, string>): Promise<number>;
  close(): Promise<void>;
}

export async function startEdge(env: Record<string, string>): Promise<TestEdge> {
  const config = loadConfig({
    schema: configSchema,
    envMap: configEnv,
    env: { HOST: '127.0.0.1', PORT: '0', ...env },
  });
  const logger = createLogger({ service: 'edge-gateway', level: 'silent' });
  const metrics = createMetrics('edge-gateway', { defaultMetrics: false });
  const wiring = await buildEdgeParts(config, logger, metrics.registry);
  const app = buildApp({ config, logger, metrics, readiness: new Readiness() }, wiring.parts);
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  return {
    url,
    app,
    metric: async (name, labels = {}) => {
      const text = await metrics.registry.metrics();
      let sum = 0;
      for (const line of text.split('\n')) {
        const m = /^([a-z_:]+)\{([^}]*)\} (\S+)$/.exec(line);
        if (!m || m[1] !== name) continue;
        const have = Object.fromEntries(
          [...(m[2] as string).matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]),
        );
        if (Object.entries(labels).every(([k, v]) => have[k] === v)) sum += Number(m[3]);
      }
      return sum;
    },
    close: async () => {
      await app.close();
      await wiring.close();
    },
  };
}
