// HttpWorkerPool's supervision with the real worker script (dist/inference/http-worker.js): a
// worker that cannot attach (its engine's key names nothing) says why and exits; the pool keeps
// the main thread not ready, starts another after 1 s, then 2 s, and stops once draining.
import { Writable } from 'node:stream';
import { createLogger, loadConfig, Readiness, Registry } from '@strata/common';
import { beforeAll, describe, expect, it } from 'vitest';
import { configEnv, configSchema } from '../src/config.js';
import { HttpWorkerPool } from '../src/inference/http-workers.js';
import { ModelHost } from '../src/inference/model-host.js';
import { LiveCounter } from '../src/inference/runtime.js';
import { modelPath, optionalModel } from './support/models.js';
import { ensureDist, waitFor } from './support/service-process.js';

const tiny = optionalModel('tinystories-656k');

beforeAll(() => ensureDist('inference/http-worker.js'), 60_000);

describe.skipIf(!tiny.path)(`HttpWorkerPool${tiny.skipped}`, () => {
  it('restarts a worker that fails to start, backing off, until the drain', async () => {
    const lines: Record<string, unknown>[] = [];
    const logger = createLogger({
      service: 'inference-backend',
      destination: new Writable({
        write(chunk, _e, done) {
          for (const line of String(chunk).split('\n')) if (line) lines.push(JSON.parse(line));
          done();
        },
      }),
    });
    const config = loadConfig({
      schema: configSchema,
      envMap: configEnv,
      env: { STRATA_MODEL_DIR: modelPath('tinystories-656k'), STRATA_HTTP_WORKERS: '2', LOG_LEVEL: 'silent' },
    });
    const readiness = new Readiness();
    const host = new ModelHost(config, readiness, logger);
    const pool = new HttpWorkerPool({
      config,
      logger,
      readiness,
      host,
      registry: new Registry(),
      script: new URL('../dist/inference/http-worker.js', import.meta.url),
    });
    expect(pool.size).toBe(1);
    expect(readiness.report().checks.http_workers?.ok).toBe(false);
    // No engine was ever shared under this key: the worker's attach fails.
    await pool.start(
      {
        engineKey: 424242,
        live: new LiveCounter().buffer,
        grammar: { available: false, code: 'STRATA_GRAMMAR_UNAVAILABLE', message: 'not loaded' },
      },
      '127.0.0.1',
      0,
    );
    const failed = lines.find((l) => l.msg === 'http worker failed to start');
    expect(String(failed?.reason)).toMatch(/STRATA_ENGINE_CLOSED|no engine/);
    const exits = () => lines.filter((l) => l.msg === 'http worker exited; starting another');
    await waitFor('two restarts', async () => (exits().length >= 2 ? true : undefined), 10_000);
    expect(exits().map((l) => l.restart_in_ms)).toEqual([1000, 2000]);
    expect(readiness.report().checks.http_workers).toMatchObject({ ok: false });
    expect(String(readiness.report().checks.http_workers?.detail)).toMatch(
      /worker 1 exited with code \d+; restarting/,
    );
    await pool.drain();
    const after = exits().length;
    await new Promise((r) => setTimeout(r, 2_500));
    expect(exits().length).toBe(after);
  }, 30_000);
});
