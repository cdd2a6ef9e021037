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

export interface ExitOptions {
  /**
   * Exit 1 this long after shutdown began even if it has not finished (e.g. logs that cannot be
   * written because stdout's reader is gone): a shutdown must never hang.
   */
  forceExitAfterMs: number;
  /**
   * Also shut down when stdin closes: a launcher that spawned this process with a stdin pipe
   * (the local platform) takes its children down with it, even when it is killed.
   */
  exitWithStdin?: boolean;
}

/**
 * SIGTERM/SIGINT (and, if asked, stdin closing) → shutdown, then exit 0 when drained, 1 when
 * the deadline cut requests or shutdown failed or overran forceExitAfterMs.
 */
export function exitOnSignals(
  shutdown: (reason: string) => Promise<DrainOutcome>,
  logger: Logger,
  options: ExitOptions,
): void {
  let started = false;
  const begin = (reason: string) => {
    if (started) return;
    started = true;
    setTimeout(() => process.exit(1), options.forceExitAfterMs).unref();
    shutdown(reason).then(
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
  };
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => begin(signal));
  if (options.exitWithStdin) {
    process.stdin.on('end', () => begin('stdin closed (launcher exited)'));
    process.stdin.on('error', () => begin('stdin closed (launcher exited)'));
    process.stdin.resume();
  }
}
