// Starts a service process: load config, build the app, listen, announce where, and wire
// SIGTERM to a draining shutdown.
import type { FastifyInstance, FastifyListenOptions } from 'fastify';
import type { Logger } from 'pino';
import type { z } from 'zod';
import { type BaseServiceConfig, ConfigError, type EnvMap, loadConfig } from './config.js';
import { createLogger } from './logger.js';
import { createMetrics, type ServiceMetrics } from './metrics.js';
import { Readiness } from './readiness.js';
import { applyHttpLimits } from './request-guards.js';
import { serveMetricsOnOwnPort } from './service.js';
import { createShutdown, exitOnSignals } from './shutdown.js';
import { startTelemetry, type Telemetry } from './telemetry.js';

// Past the drain deadline, the time cleanup (engine close, trace flush) may still take.
const FORCE_EXIT_GRACE_MS = 10_000;

export interface RunOptions {
  app: FastifyInstance;
  logger: Logger;
  telemetry: Telemetry;
  host: string;
  port: number;
  /** /metrics on a port of its own (serveMetricsOnOwnPort); undefined: on the API port. */
  metricsPort?: number | undefined;
  /**
   * Listen with SO_REUSEPORT, so that other threads of this process can listen on the same port
   * and the kernel spreads connections among them (Linux).
   */
  reusePort?: boolean;
  drainTimeoutMs: number;
  cleanup?: () => Promise<void>;
}

export async function runService(options: RunOptions): Promise<string> {
  const { app, logger, telemetry } = options;
  const shutdown = createShutdown({
    app,
    readiness: app.readiness,
    logger,
    drainTimeoutMs: options.drainTimeoutMs,
    cleanup: async () => {
      await options.cleanup?.();
      await telemetry.shutdown();
    },
  });
  exitOnSignals(shutdown, logger, {
    forceExitAfterMs: options.drainTimeoutMs + FORCE_EXIT_GRACE_MS,
    exitWithStdin: process.env.STRATA_EXIT_WITH_STDIN === '1',
  });
  const metricsAddress =
    options.metricsPort === undefined
      ? undefined
      : await serveMetricsOnOwnPort(app, options.host, options.metricsPort);
  // Fastify hands the options to net.Server.listen, which knows reusePort (Node >= 22.12);
  // Fastify's own type does not list it yet.
  const address = await app.listen({
    host: options.host,
    port: options.port,
    ...(options.reusePort ? { reusePort: true } : {}),
  } as FastifyListenOptions);
  // A machine-readable line: the local launcher and tests read the bound port from it.
  logger.info(
    { address, tracing: telemetry.enabled, ...(metricsAddress ? { metrics_address: metricsAddress } : {}) },
    'listening',
  );
  return address;
}

export interface BootContext<C> {
  config: C;
  logger: Logger;
  metrics: ServiceMetrics;
  readiness: Readiness;
  telemetry: Telemetry;
}

export interface BootOptions<S extends z.ZodType<BaseServiceConfig>> {
  name: string;
  schema: S;
  envMap: EnvMap;
  /** Environment variable naming the service's YAML config file. */
  fileEnv: string;
  build: (ctx: BootContext<z.output<S>>) => Promise<FastifyInstance> | FastifyInstance;
  cleanup?: () => Promise<void>;
  /** Listen with SO_REUSEPORT (RunOptions.reusePort) for this configuration. */
  reusePort?: (config: z.output<S>) => boolean;
}

/**
 * The whole start-up of a service process: config → logger, metrics, tracing → app → listen.
 * Returns the listening app.
 */
export async function bootService<S extends z.ZodType<BaseServiceConfig>>(
  options: BootOptions<S>,
): Promise<FastifyInstance> {
  let config: z.output<S>;
  try {
    config = loadConfig({ schema: options.schema, envMap: options.envMap, fileEnv: options.fileEnv });
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`${options.name}: ${err.message}\n`);
    process.exit(2);
  }
  const logger = createLogger({ service: options.name, level: config.logLevel });
  const metrics = createMetrics(options.name);
  const readiness = new Readiness();
  const telemetry = startTelemetry({ serviceName: options.name, endpoint: config.otlpEndpoint });
  let app: FastifyInstance;
  try {
    app = await options.build({ config, logger, metrics, readiness, telemetry });
  } catch (err) {
    // A file the config names (routes, tenants) is invalid: the same one-message exit.
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`${options.name}: ${err.message}\n`);
    process.exit(2);
  }
  // Here rather than in each service's build, so that every service gets them unchanged.
  applyHttpLimits(app, config.http);
  await runService({
    app,
    logger,
    telemetry,
    host: config.host,
    port: config.port,
    metricsPort: config.metricsPort,
    drainTimeoutMs: config.drainTimeoutMs,
    ...(options.reusePort?.(config) ? { reusePort: true } : {}),
    ...(options.cleanup ? { cleanup: options.cleanup } : {}),
  });
  return app;
}
