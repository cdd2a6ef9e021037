// Hostile input at the backend (issue 23, items 3-5), through the guards of the service base:
// the real backend process on tinystories-656k. Deep JSON, invalid UTF-8 and lone surrogates
// get a 400 before any tokenizing; slow clients lose their connection; the process serves on.
import {
  fuzzGuards,
  nestedJson,
  optionalTestModel,
  postBody,
  type ServiceProcess,
  SLOW_CLIENT_TIMEOUT_ENV,
  serviceEntry,
  slowClientProblems,
  startServiceProcess,
  tokenStreamProblems,
  waitReady,
} from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const tiny = optionalTestModel('tinystories-656k');

describe.skipIf(!tiny.path)(`inference-backend: hostile input${tiny.skipped}`, () => {
  let backend: ServiceProcess;

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
          ...SLOW_CLIENT_TIMEOUT_ENV,
        },
      },
    );
    await waitReady(backend.url);
  }, 60_000);

  afterAll(async () => {
    await backend?.stop('SIGKILL');
  });

  const post = (path: string, body: Buffer | string) => postBody(`${backend.url}${path}`, body);

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
      const limits = {
        base,
        textPath: ['prompt'],
        maxJsonDepth: 128,
        bodyLimit: 2 * 1024 * 1024,
        randomCases: 100,
      };
      const report = await fuzzGuards(`inference-backend ${path}`, limits, (body) => post(path, body));
      expect(report.problems).toEqual([]);
    }
    const load = (await (await fetch(`${backend.url}/load`)).json()) as Record<string, number>;
    expect(load).toMatchObject({ running: 0, waiting: 0 });
    expect(load.kv_blocks_free).toBe(load.kv_blocks_total);
    expect(backend.child.exitCode).toBeNull();
  });

  it('closes a connection whose headers or body arrive a byte at a time (408)', async () => {
    const problems = await slowClientProblems({
      target: backend.url,
      slowHeaders: 'POST /v1/generate HTTP/1.1\r\nHost: x\r\n',
      slowBody: {
        requestLine: 'POST /v1/generate HTTP/1.1',
        body: '{"prompt":"Once upon a time","max_tokens":1}',
      },
    });
    expect(problems).toEqual([]);
    // A stream whose request arrived in time runs to its end.
    const stream = await post(
      '/v1/generate',
      '{"prompt":"Once upon a time","max_tokens":64,"ignore_eos":true,"stream":true}',
    );
    expect(tokenStreamProblems(stream, 64)).toEqual([]);
  });
});
