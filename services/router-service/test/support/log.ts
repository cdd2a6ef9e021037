// A logger whose JSON lines tests can read back.
import { createLogger, type Logger } from '@strata/common';

export interface CapturedLogger {
  logger: Logger;
  lines: Array<Record<string, unknown>>;
}

export function captureLogger(): CapturedLogger {
  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger({
    service: 'router-service',
    level: 'debug',
    destination: { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) },
  });
  return { logger, lines };
}
