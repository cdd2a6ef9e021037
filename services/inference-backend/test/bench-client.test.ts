// bench/sse-client.c, the light client of bench/http-latency.mjs, against a real backend: it
// must read every token event of chunked SSE streams, wave after wave on its few connections,
// tell a rejected request from a stream, and stamp times on process.hrtime's clock, or the
// benchmark's numbers mean nothing.
import { type AddressInfo, createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildSseClient, runSseClient, type SseClientResult } from '../bench/sse-client.mjs';
import { startBackend, type TestBackend } from './support/backend.js';
import { optionalModel } from './support/models.js';

const tiny = optionalModel('tinystories-656k');

const hrMs = () => Number(process.hrtime.bigint()) / 1e6;

let backend: TestBackend;
let binary: string;
beforeAll(async () => {
  binary = buildSseClient();
  backend = await startBackend({ STRATA_WARMUP: 'false' });
});
afterAll(() => backend.close());

const stream = (maxTokens: number) => ({
  prompt: 'Once upon a time',
  max_tokens: maxTokens,
  temperature: 0,
  ignore_eos: true,
  stream: true,
});

describe.skipIf(!tiny.path)(`bench/sse-client.c${tiny.skipped}`, () => {
  it('reads every token of each stream, wave after wave, and tells a rejected request from a stream', async () => {
    const lengths: number[] = [7, 1, 120, 33, 64];
    const requests = [
      { requestId: 'bad', body: { ...stream(5), max_tokens: -1 } },
      ...lengths.map((n, i) => ({ requestId: `ok-${i}`, body: stream(n) })),
    ];
    const before = hrMs();
    const results = await runSseClient(binary, backend.url, 2, requests);
    const after = hrMs();

    expect(results.map((r) => r.requestId)).toEqual(requests.map((r) => r.requestId));
    expect(results[0]).toMatchObject({ ok: false, status: 400, times: [] });
    for (const [i, length] of lengths.entries()) {
      const r = results[i + 1] as SseClientResult;
      expect(r).toMatchObject({ ok: true, status: 200 });
      expect(r.times).toHaveLength(length);
      expect(r.sent).toBeGreaterThanOrEqual(before);
      let last = r.sent;
      for (const t of r.times) {
        expect(t).toBeDefined();
        expect(t).toBeGreaterThanOrEqual(last);
        last = t as number;
      }
      expect(last).toBeLessThanOrEqual(after);
    }
  });

  it('reports a refused connection as status 0 instead of hanging', async () => {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    await new Promise((resolve) => server.close(resolve));
    const url = `http://127.0.0.1:${port}`;
    const [result] = await runSseClient(binary, url, 1, [{ requestId: 'gone', body: stream(3) }]);
    expect(result).toMatchObject({ requestId: 'gone', ok: false, status: 0, times: [] });
  });
});
