import { Writable } from 'node:stream';
import { stdTimeFunctions } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createLogger, isoTime, requestLogger } from '../src/logger.js';

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
  afterEach(() => vi.useRealTimers());

  it("stamps each line with pino's ISO time, formatted once per millisecond", () => {
    vi.useFakeTimers();
    for (const at of ['2026-11-26T06:15:00.123Z', '2026-11-26T06:15:00.124Z', '2027-01-01T00:00:00.000Z']) {
      vi.setSystemTime(new Date(at));
      expect(isoTime()).toBe(stdTimeFunctions.isoTime());
      expect(isoTime()).toBe(`,"time":"${at}"`);
    }
    const { stream, lines } = capture();
    const logger = createLogger({ service: 's', destination: stream });
    logger.info('a');
    vi.advanceTimersByTime(5);
    logger.info('b');
    expect(lines().map((l) => l.time)).toEqual(['2027-01-01T00:00:00.000Z', '2027-01-01T00:00:00.005Z']);
  });

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
