// strata-warmup (dist/cli/warmup.js) as a process against a real backend, and against a stub
// that checks what it sends (Authorization header, the /v1/generate body shape only).
import { spawn } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { generateRequestSchema } from '@strata/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { percentile, roundConcurrencies } from '../src/cli/warmup.js';
import { startBackend, type TestBackend } from './support/backend.js';
import { optionalModel } from './support/models.js';

const tiny = optionalModel('tinystories-656k');

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(root, 'dist', 'cli', 'warmup.js');

/** Runs the CLI asynchronously (the backend lives in this process's event loop). */
function warmup(args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((done) => {
    const proc = spawn(process.execPath, [cli, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    proc.stdout.on('data', (c: Buffer) => {
      out += c.toString();
    });
    proc.stderr.on('data', (c: Buffer) => {
      err += c.toString();
    });
    const timer = setTimeout(() => proc.kill('SIGKILL'), 20_000);
    proc.on('close', (code) => {
      clearTimeout(timer);
      done({ code, out, err });
    });
  });
}

const quick = ['--requests', '6', '--concurrency', '4', '--max-tokens', '8', '--timeout-s', '15'];

describe.skipIf(!tiny.path)(`strata-warmup${tiny.skipped}`, () => {
  // Started here, not for the whole file: the tests below this block need no model.
  let backend: TestBackend;
  beforeAll(async () => {
    backend = await startBackend({ STRATA_WARMUP: 'false' });
  });
  afterAll(() => backend.close());

  it('exits 0 when the last round p90 TTFT is under a generous bound', async () => {
    const r = await warmup([
      '--url',
      backend.url,
      '--model',
      'tinystories-656k',
      ...quick,
      '--ttft-bound-ms',
      '10000',
    ]);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/round 4\/4: concurrency 4, 6 ok, 0 failed/);
    expect(r.out).toContain('ttft_p90_ms');
    expect(r.out).toMatch(/settled: last round p90 TTFT [\d.]+ ms < bound 10000 ms/);
  });

  it('exits 1 when the bound is impossible', async () => {
    const r = await warmup(['--url', backend.url, ...quick, '--ttft-bound-ms', '0.001']);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/NOT settled: last round p90 TTFT [\d.]+ ms >= bound 0.001 ms/);
  });

  it('exits 1 and reports every failed request (unknown model: 404)', async () => {
    const r = await warmup(['--url', backend.url, '--model', 'nope', ...quick]);
    expect(r.code).toBe(1);
    expect(r.err.match(/FAILED HTTP 404/g)).toHaveLength(6 * 4);
    expect(r.err).toContain('NOT settled: 24 request(s) failed with errors other than 429/503');
  });

  it('exits 2 on bad usage', async () => {
    for (const args of [
      [],
      ['--url', 'not a url'],
      ['--url', backend.url, '--requests', 'ten'],
      ['--url', backend.url, '--concurrency', '0'],
      ['--url', backend.url, '--bogus'],
    ]) {
      const r = await warmup(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.err).toContain('usage: strata-warmup');
    }
  });

  it('exits 1 when the target never turns ready within --timeout-s', async () => {
    const r = await warmup(['--url', 'http://127.0.0.1:9', '--timeout-s', '1']);
    expect(r.code).toBe(1);
    expect(r.err).toContain('not ready before the timeout');
  });
});

describe('strata-warmup through an edge (stub)', () => {
  let stub: Server;
  let url: string;
  const seen: { auth: string | undefined; valid: boolean }[] = [];
  beforeAll(async () => {
    stub = createServer((req, res) => {
      if (req.url === '/health/ready') {
        res.writeHead(200).end('{}');
        return;
      }
      let body = '';
      req.on('data', (c: Buffer) => {
        body += c.toString();
      });
      req.on('end', () => {
        seen.push({
          auth: req.headers.authorization,
          valid: generateRequestSchema.safeParse(JSON.parse(body)).success,
        });
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: {"type":"token","token":"a","id":5,"index":0}\n\n');
        res.end(
          'data: {"type":"done","finish_reason":"length","usage":{"input_tokens":1,"output_tokens":1}}\n\n',
        );
      });
    });
    await new Promise<void>((r) => stub.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(stub.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((r) => stub.close(() => r())));

  it('sends Authorization: Bearer KEY and only the /v1/generate body shape', async () => {
    const r = await warmup(['--url', url, '--api-key', 'sk-test', '--requests', '3', '--concurrency', '2']);
    expect(r.code).toBe(0);
    expect(seen).toHaveLength(9);
    expect(seen.every((s) => s.auth === 'Bearer sk-test' && s.valid)).toBe(true);
  });
});

describe('helpers', () => {
  it('rounds rise to the concurrency, then repeat it', () => {
    expect(roundConcurrencies(1)).toEqual([1, 1]);
    expect(roundConcurrencies(8)).toEqual([1, 2, 4, 8, 8]);
    expect(roundConcurrencies(6)).toEqual([1, 2, 4, 6, 6]);
  });
  it('nearest-rank percentiles', () => {
    const v = Array.from({ length: 10 }, (_, i) => i + 1);
    expect(percentile(v, 50)).toBe(5);
    expect(percentile(v, 90)).toBe(9);
    expect(percentile(v, 99)).toBe(10);
    expect(percentile([], 90)).toBeNaN();
  });
});
