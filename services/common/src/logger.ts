// pino JSON lines for Loki: ISO timestamps, a textual level, the service name on every line,
// and request_id / trace_id bound on request-scoped children.
import { type DestinationStream, type Logger, pino } from 'pino';

export type { Logger } from 'pino';

export interface LoggerOptions {
  service: string;
  level?: string;
  /** Where lines go; stdout by default. Tests pass a stream to read them back. */
  destination?: DestinationStream;
}

let stdoutGuarded = false;

// Lines go to process.stdout, not a sonic-boom destination: sonic-boom 4's flushSync, which pino
// runs at exit, retries a write that failed with EPIPE forever, so a process whose stdout reader
// was gone (a killed launcher) hung inside process.exit(). On process.stdout, EPIPE is an error
// event: the lines are dropped and the process goes on (and can exit).
function stdoutDestination(): DestinationStream {
  if (!stdoutGuarded) {
    stdoutGuarded = true;
    process.stdout.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code !== 'EPIPE') throw err;
    });
  }
  return process.stdout;
}

let stampedMs = Number.NaN;
let stamp = '';

/**
 * pino's isoTime, made once per millisecond: a busy hop writes several lines a millisecond, and
 * formatting the date was about 1.5% of the edge's CPU per request (a profile of its hop
 * benchmark). The same text as stdTimeFunctions.isoTime.
 */
export function isoTime(): string {
  const now = Date.now();
  if (now !== stampedMs) {
    stampedMs = now;
    stamp = `,"time":"${new Date(now).toISOString()}"`;
  }
  return stamp;
}

export function createLogger(options: LoggerOptions): Logger {
  return pino(
    {
      level: options.level ?? 'info',
      base: { service: options.service },
      timestamp: isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    options.destination ?? stdoutDestination(),
  );
}

export interface RequestBindings {
  requestId: string;
  traceId?: string | undefined;
}

export function requestLogger(logger: Logger, bindings: RequestBindings): Logger {
  return logger.child(
    bindings.traceId
      ? { request_id: bindings.requestId, trace_id: bindings.traceId }
      : { request_id: bindings.requestId },
  );
}
