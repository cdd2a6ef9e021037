import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger, requestLogger } from '../src/logger.js';

function capture(): { stream: Writable; lines: () => Record<string, unknown>[] } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      chunks.push(String(chunk));
      done();
    },
  });
  const lines = () =>
    chunks
      .join('')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  return { stream, lines };
}

describe('logger', () => {
  it('writes JSON lines with service, textual level and ISO time', () => {
    const { stream, lines } = capture();
    createLogger({ service: 'router-service', destination: stream }).info({ backend: 'b1' }, 'picked');
    const [line] = lines();
    expect(line).toMatchObject({ service: 'router-service', level: 'info', msg: 'picked', backend: 'b1' });
    expect(typeof line?.time).toBe('string');
    expect(Number.isNaN(Date.parse(String(line?.time)))).toBe(false);
  });

  it('binds request_id and trace_id on request-scoped children', () => {
    const { stream, lines } = capture();
    const logger = createLogger({ service: 'edge-gateway', destination: stream });
    requestLogger(logger, { requestId: 'r-1', traceId: '4bf92f3577b34da6a3ce929d0e0e4736' }).warn('slow');
    requestLogger(logger, { requestId: 'r-2' }).info('fine');
    const [first, second] = lines();
    expect(first).toMatchObject({
      request_id: 'r-1',
      trace_id: '4bf92f3577b34da6a3ce929d0e0e4736',
      level: 'warn',
    });
    expect(second).toMatchObject({ request_id: 'r-2' });
    expect(second).not.toHaveProperty('trace_id');
  });

  it('respects the level', () => {
    const { stream, lines } = capture();
    const logger = createLogger({ service: 's', level: 'warn', destination: stream });
    logger.info('hidden');
    logger.error('shown');
    expect(lines().map((l) => l.msg)).toEqual(['shown']);
  });
});
