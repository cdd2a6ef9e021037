// Hostile input at the backend (issue 23, items 3-5), through the guards of the service base:
// the real backend process on tinystories-656k. Deep JSON, invalid UTF-8 and lone surrogates
// get a 400 before any tokenizing; slow clients lose their connection; the process serves on.
import {
  fuzzBodies,
  hostileBodies,
  nestedJson,
  optionalTestModel,
  type ServiceProcess,
  serviceEntry,
  startServiceProcess,
  trickle,
  waitReady,
} from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const tiny = optionalTestModel('tinystories-656k');
const SLACK_MS = 400;

describe.skipIf(!tiny.path)(`inference-backend: hostile input${tiny.skipped}`, () => {
  let backend: ServiceProcess;
  let port: number;

  beforeAll(async () => {
    backend = await startServiceProcess(
      'backend',
      serviceEntry('@strata/inference-backend', import.meta.url),
      {
        env: {
          STRATA_MODEL_DIR: tiny.path as string,
          STRATA_KV_CACHE_BLOCKS: '256',
          STRATA_ENGINE_THREADS: '1',
          STRATA_WARMUP: 'false',
          STRATA_HTTP_HEADERS_TIMEOUT_MS: '300',
          STRATA_HTTP_REQUEST_TIMEOUT_MS: '600',
        },
      },
    );
    port = Number(new URL(backend.url).port);
    await waitReady(backend.url);
  }, 60_000);

  afterAll(async () => {
    await backend?.stop('SIGKILL');
  });

  const post = async (path: string, body: Buffer | string) => {
    const res = await fetch(`${backend.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
    return { status: res.status, body: await res.text() };
  };

  it('answers 5,000 levels of nesting 400 STRATA_BODY_TOO_DEEP', async () => {
    const res = await post(
      '/v1/completions',
      `{"prompt":"Once","max_tokens":1,"x":${nestedJson('mixed', 5000)}}`,
    );
    expect(res.status).toBe(400);
    expect(JSON.parse(res.body).error).toMatchObject({ code: 'STRATA_BODY_TOO_DEEP' });
  });

  it('fuzz: no 5xx, each guard answers its own code, and the engine serves on', async () => {
    const endpoints = [
      { path: '/v1/generate', base: { prompt: 'Once upon a time', max_tokens: 1 } },
      { path: '/v1/completions', base: { prompt: 'Once upon a time', max_tokens: 1 } },
    ];
    for (const { path, base } of endpoints) {
      const cases = hostileBodies({
        base,
        textPath: ['prompt'],
        maxJsonDepth: 128,
        bodyLimit: 2 * 1024 * 1024,
        randomCases: 100,
      });
      const report = await fuzzBodies(Buffer.from(JSON.stringify(base)), cases, (body) => post(path, body));
      console.log(`inference-backend ${path}: ${report.cases} cases`, report.answers);
      expect(report.failures).toEqual([]);
      expect(report.answers['400 STRATA_BODY_TOO_DEEP']).toBeGreaterThan(20);
      expect(report.answers['400 STRATA_INVALID_ENCODING']).toBeGreaterThan(20);
    }
    const load = (await (await fetch(`${backend.url}/load`)).json()) as Record<string, number>;
    expect(load).toMatchObject({ running: 0, waiting: 0 });
    expect(load.kv_blocks_free).toBe(load.kv_blocks_total);
    expect(backend.child.exitCode).toBeNull();
  });

  it('closes a connection whose headers or body arrive a byte at a time (408)', async () => {
    const headers = await trickle(port, 'POST /v1/generate HTTP/1.1\r\nHost: x\r\n', {
      intervalMs: 50,
      giveUpMs: 5000,
    });
    expect(headers.closedAfterMs).toBeLessThan(300 + SLACK_MS);
    expect(headers.received).toMatch(/^HTTP\/1\.1 408 /);
    const body = '{"prompt":"Once upon a time","max_tokens":1}';
    const slow = await trickle(port, body, {
      prefix: `POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`,
      intervalMs: 50,
      giveUpMs: 5000,
    });
    expect(slow.closedAfterMs).toBeGreaterThanOrEqual(600 - 20);
    expect(slow.closedAfterMs).toBeLessThan(600 + SLACK_MS);
    expect(slow.received).toMatch(/^HTTP\/1\.1 408 /);
    expect(slow.received).toContain('"code":"STRATA_REQUEST_TIMEOUT"');
    // A stream whose request arrived in time runs to its end.
    const stream = await post(
      '/v1/generate',
      '{"prompt":"Once upon a time","max_tokens":64,"ignore_eos":true,"stream":true}',
    );
    expect(stream.status).toBe(200);
    expect(stream.body.match(/"type":"token"/g)).toHaveLength(64);
    expect(stream.body).toContain('"type":"done"');
  });
});
