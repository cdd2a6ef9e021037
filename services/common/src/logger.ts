// pino JSON lines for Loki: ISO timestamps, a textual level, the service name on every line,
// and request_id / trace_id bound on request-scoped children.
import { type DestinationStream, destination, type Logger, pino, stdTimeFunctions } from 'pino';

export type { Logger } from 'pino';

export interface LoggerOptions {
  service: string;
  level?: string;
  /** Where lines go; stdout by default. Tests pass a stream to read them back. */
  destination?: DestinationStream;
}

export function createLogger(options: LoggerOptions): Logger {
  return pino(
    {
      level: options.level ?? 'info',
      base: { service: options.service },
      timestamp: stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    options.destination ?? destination({ sync: false }),
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
