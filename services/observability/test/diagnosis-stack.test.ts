// The saturation diagnosis on the real CPU engine: a backend limited to one running sequence
// queues a burst; a backend with a KV pool for barely one full-length sequence preempts under a
// burst of long prompts; both go idle when the burst ends. States are read from each sidecar's
// /metrics, polled until they appear: nothing here depends on how fast the engine is.
import { optionalTestModel } from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from './support/prometheus.js';
import {
  type LoggedService,
  MODEL,
  modelDir,
  postJson,
  randomTokens,
  saturationState,
  startLogged,
} from './support/stack.js';

const tiny = optionalTestModel(MODEL);

interface Burst {
  /** Stops issuing requests and resolves with the last event of every request sent. */
  stop(): Promise<(string | undefined)[]>;
}

/** `clients` loops, each sending one streamed request after another until stopped. */
function burst(url: string, clients: number, body: (n: number) => object): Burst {
  let stopped = false;
  let sent = 0;
  const ends: (string | undefined)[] = [];
  const loops = Array.from({ length: clients }, async () => {
    while (!stopped) {
      const r = await postJson(`${url}/v1/generate`, { ...body(sent++), stream: true });
      ends.push(r.status === 200 ? (r.events.at(-1)?.type as string | undefined) : `status ${r.status}`);
    }
  });
  return {
    async stop() {
      stopped = true;
      await Promise.all(loops);
      return ends;
    },
  };
}

let queued: LoggedService;
let queuedSidecar: LoggedService;
let tight: LoggedService;
let tightSidecar: LoggedService;

const sidecarEnv = (backend: LoggedService) => ({
  STRATA_BACKEND_URL: backend.url,
  STRATA_SIDECAR_BACKEND_INTERVAL_MS: '100',
});

beforeAll(async () => {
  // One sequence at a time, KV to spare: a burst can only queue.
  queued = await startLogged('backend-queued', 'backend', {
    STRATA_MODEL_DIR: modelDir(),
    STRATA_MAX_NUM_SEQS: '1',
    STRATA_KV_CACHE_BLOCKS: '256',
    STRATA_ENGINE_THREADS: '1',
  });
  // 40 blocks of 16 tokens: one 512-token context fits (32 blocks), two long sequences do not.
  tight = await startLogged('backend-tight', 'backend', {
    STRATA_MODEL_DIR: modelDir(),
    STRATA_MAX_NUM_SEQS: '4',
    STRATA_KV_CACHE_BLOCKS: '40',
    STRATA_ENGINE_THREADS: '1',
  });
  queuedSidecar = await startLogged('sidecar-queued', 'sidecar', sidecarEnv(queued));
  tightSidecar = await startLogged('sidecar-tight', 'sidecar', sidecarEnv(tight));
  for (const b of [queued, tight]) {
    await waitFor(`${b.name} ready`, async () => (await fetch(`${b.url}/health/ready`)).ok);
  }
}, 240_000);

afterAll(async () => {
  await Promise.all([queuedSidecar, tightSidecar, queued, tight].map((s) => s?.stop()));
});

describe.skipIf(!tiny.path)(`saturation diagnosis on the CPU engine${tiny.skipped}`, () => {
  it('starts idle, reads queueing and memory pressure under bursts, and idle after them', async () => {
    for (const s of [queuedSidecar, tightSidecar]) {
      await waitFor(`${s.name} idle`, async () => (await saturationState(s.url)) === 'idle');
    }
    // Short prompts, long outputs, six clients on one sequence slot: five always wait.
    const q = burst(queued.url, 6, (n) => ({
      prompt: randomTokens(32, n),
      max_tokens: 200,
      ignore_eos: true,
    }));
    // 160-token prompts growing to 500 tokens: two sequences need 64 blocks of the 40.
    const m = burst(tight.url, 6, (n) => ({
      prompt: randomTokens(160, 1000 + n),
      max_tokens: 340,
      ignore_eos: true,
    }));
    await waitFor('queueing', async () => (await saturationState(queuedSidecar.url)) === 'queueing');
    // Memory pressure must come from the KV pool: preemptions counted, or KV at the threshold,
    // in the inputs of some scrape during the burst. Not necessarily in the scrape that shows
    // the state: the diagnoser holds a state until another is confirmed several polls in a row,
    // so the inputs beside memory_pressure may already have eased.
    let fromKvPool = false;
    const scrapeTight = async () => {
      const text = await (await fetch(`${tightSidecar.url}/metrics`)).text();
      const preempted = Number(
        /^strata_saturation_input_recent_preemptions\{[^}]*\} (\S+)$/m.exec(text)?.[1],
      );
      const kv = Number(/^strata_saturation_input_kv_usage_ratio\{[^}]*\} (\S+)$/m.exec(text)?.[1]);
      fromKvPool ||= preempted > 0 || kv >= 0.9;
      return /^strata_saturation_state\{state="(\w+)"[^}]*\} 1$/m.exec(text)?.[1];
    };
    await waitFor('memory_pressure', async () => (await scrapeTight()) === 'memory_pressure');
    await waitFor('preemptions or a full KV pool', async () => {
      if (!fromKvPool) await scrapeTight();
      return fromKvPool;
    });
    const [qEnds, mEnds] = await Promise.all([q.stop(), m.stop()]);
    // Every request of both bursts finished normally: the diagnosis only watched.
    expect(new Set([...qEnds, ...mEnds])).toEqual(new Set(['done']));
    expect(fromKvPool).toBe(true);
    for (const s of [queuedSidecar, tightSidecar]) {
      await waitFor(`${s.name} idle again`, async () => (await saturationState(s.url)) === 'idle');
    }
  }, 300_000);

  it('keeps serving queued streams to the end after the sidecar is killed -9', async () => {
    const q = burst(queued.url, 4, (n) => ({
      prompt: randomTokens(16, 5000 + n),
      max_tokens: 200,
      ignore_eos: true,
    }));
    await waitFor('queueing', async () => (await saturationState(queuedSidecar.url)) === 'queueing');
    // Requests are waiting behind the one running: they run after the sidecar is gone.
    await queuedSidecar.stop('SIGKILL');
    expect(queuedSidecar.child.signalCode).toBe('SIGKILL');
    const load = (await (await fetch(`${queued.url}/load`)).json()) as { waiting: number; running: number };
    const ends = await q.stop();
    expect(ends.length).toBeGreaterThanOrEqual(4);
    expect(new Set(ends)).toEqual(new Set(['done']));
    expect(load.running + load.waiting).toBeGreaterThan(0);
  }, 300_000);
});
