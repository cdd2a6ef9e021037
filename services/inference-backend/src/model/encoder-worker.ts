// The main thread's side of the tokenizer worker (tokenizer-worker.ts): encodes texts in a worker
// thread and hands back their ids as Int32Arrays. The `tokenizers` binding already encodes on the
// libuv pool, but a long prompt still costs the event loop its ids copied into a JS array and
// its Encoding freed (0.4 to 0.6 s for 2.6 M tokens), enough for the router's probes to time out.
//
// A worker that dies (an uncaught error in it, a crash) fails the encodes it held with
// STRATA_INTERNAL, and the next encode starts a new one. The worker is unref'd while idle, so it never keeps the
// process alive by itself.
import { Worker } from 'node:worker_threads';
import { StrataError } from '@strata/common';
import type { TokenizerSource } from './model-files.js';
import type { EncodeMessage, WorkerReply, WorkerSource } from './tokenizer-worker.js';

interface Pending {
  resolve(ids: Int32Array): void;
  reject(err: Error): void;
}

interface Running {
  worker: Worker;
  /** Settles once the worker has loaded the tokenizer (rejects if it dies first). */
  ready: Promise<void>;
  pending: Map<number, Pending>;
}

// Tests import src/ (TypeScript, run by Node's type stripping in the worker); the service dist/.
const WORKER_URL = new URL(
  import.meta.url.endsWith('.ts') ? './tokenizer-worker.ts' : './tokenizer-worker.js',
  import.meta.url,
);

export class EncoderWorker {
  readonly #source: WorkerSource;
  #running: Running | null = null;
  #nextId = 1;
  #closed = false;
  /** Workers started so far (the first, then one per replacement). */
  #starts = 0;
  #encodes = 0;

  private constructor(source: TokenizerSource) {
    this.#source =
      source.kind === 'file' ? { kind: 'file', path: source.path } : { kind: 'json', json: source.json };
  }

  /** Starts a worker on `source` and waits until it has loaded the tokenizer; rejects if it cannot. */
  static async start(source: TokenizerSource): Promise<EncoderWorker> {
    const encoder = new EncoderWorker(source);
    try {
      await encoder.#run().ready;
    } catch (err) {
      await encoder.close();
      throw err;
    }
    return encoder;
  }

  /** Workers started so far: 1, plus one per worker that died and was replaced. */
  get starts(): number {
    return this.#starts;
  }

  /** Texts handed to a worker so far. */
  get encodes(): number {
    return this.#encodes;
  }

  /** The ids of `text` (no special tokens added), encoded in the worker. */
  async encode(text: string): Promise<Int32Array> {
    if (this.#closed) throw new StrataError('STRATA_ENGINE_CLOSED', 'the tokenizer worker is closed');
    this.#encodes++;
    const running = this.#run();
    await running.ready;
    // Closed, or dead, while this waited: a message to a stopped worker would never be answered.
    if (this.#closed) throw new StrataError('STRATA_ENGINE_CLOSED', 'the tokenizer worker was closed');
    if (this.#running !== running) {
      throw new StrataError(
        'STRATA_INTERNAL',
        'the tokenizer worker stopped before encoding the prompt; retry',
      );
    }
    const id = this.#nextId++;
    return new Promise<Int32Array>((resolve, reject) => {
      running.pending.set(id, { resolve, reject });
      if (running.pending.size === 1) running.worker.ref();
      const message: EncodeMessage = { id, text };
      running.worker.postMessage(message);
    });
  }

  /** Stops the worker; encodes still waiting fail with STRATA_ENGINE_CLOSED. */
  async close(): Promise<void> {
    this.#closed = true;
    const running = this.#running;
    if (running === null) return;
    this.#running = null;
    this.#failAll(running, new StrataError('STRATA_ENGINE_CLOSED', 'the tokenizer worker was closed'));
    await running.worker.terminate();
  }

  /** The live worker, or a new one (the first, or the replacement of one that died). */
  #run(): Running {
    if (this.#running !== null) return this.#running;
    this.#starts++;
    const worker = new Worker(WORKER_URL, { workerData: this.#source });
    worker.unref();
    const pending = new Map<number, Pending>();
    let loaded!: () => void;
    let failed!: (err: Error) => void;
    const ready = new Promise<void>((resolve, reject) => {
      loaded = resolve;
      failed = reject;
    });
    ready.catch(() => {}); // also seen by whoever awaits it
    const running: Running = { worker, ready, pending };
    let error: Error | undefined;
    worker.on('message', (reply: WorkerReply) => {
      if (reply.type === 'ready') {
        loaded();
        return;
      }
      const waiting = pending.get(reply.id);
      if (waiting === undefined) return;
      pending.delete(reply.id);
      if (pending.size === 0) worker.unref();
      if (reply.type === 'ids') waiting.resolve(reply.ids);
      else waiting.reject(new Error(reply.message));
    });
    worker.on('error', (err) => {
      error = err;
    });
    worker.on('exit', (code) => {
      if (this.#running === running) this.#running = null;
      const why = error ? error.message : `exit code ${code}`;
      const failure = new StrataError(
        'STRATA_INTERNAL',
        `the tokenizer worker stopped (${why}) before encoding the prompt; a new one is started for the next request`,
        error ? { cause: error } : {},
      );
      failed(failure);
      this.#failAll(running, failure);
    });
    this.#running = running;
    return running;
  }

  #failAll(running: Running, err: Error): void {
    const waiting = [...running.pending.values()];
    running.pending.clear();
    for (const p of waiting) p.reject(err);
  }
}
