// Graceful shutdown: stop being ready, stop accepting, let in-flight work finish up to a
// deadline, then cut what is left. Kubernetes sends SIGTERM and waits terminationGracePeriod.
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import type { Readiness } from './readiness.js';

export type DrainOutcome = 'drained' | 'deadline';

/**
 * Closes the server: new connections are refused at once, requests already running finish.
 * After deadlineMs the remaining connections are destroyed.
 */
export async function drainServer(app: FastifyInstance, deadlineMs: number): Promise<DrainOutcome> {
  let timer: NodeJS.Timeout | undefined;
  const closed = app.close().then(() => 'drained' as const);
  const deadline = new Promise<'deadline'>((resolve) => {
    timer = setTimeout(() => resolve('deadline'), deadlineMs);
  });
  const outcome = await Promise.race([closed, deadline]);
  clearTimeout(timer);
  if (outcome === 'deadline') {
    app.server.closeAllConnections();
    await closed;
  }
  return outcome;
}

export interface ShutdownOptions {
  app: FastifyInstance;
  readiness: Readiness;
  logger: Logger;
  drainTimeoutMs: number;
  /** Runs after the server closed (flush telemetry, stop the engine, ...). */
  cleanup?: () => Promise<void>;
}

/** Returns a once-only shutdown function: repeated signals join the first shutdown. */
export function createShutdown(options: ShutdownOptions): (reason: string) => Promise<DrainOutcome> {
  let running: Promise<DrainOutcome> | undefined;
  return (reason) => {
    running ??= (async () => {
      const started = Date.now();
      options.readiness.startDraining();
      options.logger.info({ reason, drain_timeout_ms: options.drainTimeoutMs }, 'shutdown: draining');
      const outcome = await drainServer(options.app, options.drainTimeoutMs);
      await options.cleanup?.();
      options.logger.info({ outcome, elapsed_ms: Date.now() - started }, 'shutdown: done');
      return outcome;
    })();
    return running;
  };
}

/** SIGTERM/SIGINT → shutdown, then exit 0 when drained, 1 when the deadline cut requests. */
export function exitOnSignals(shutdown: (reason: string) => Promise<DrainOutcome>, logger: Logger): void {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      shutdown(signal).then(
        (outcome) => {
          logger.flush();
          process.exit(outcome === 'drained' ? 0 : 1);
        },
        (err: unknown) => {
          logger.error({ err }, 'shutdown failed');
          logger.flush();
          process.exit(1);
        },
      );
    });
  }
}
