// The backend's execution core, shared by every route: the loaded model, admission control,
// per-request deadlines and cancellation, and per-request timings for metrics and logs.
import { basename } from 'node:path';
import { StrataError } from '@strata/common';
import type { Config } from '../config.js';
import { Engine, type FinishReason, type SamplingParams } from '../engine/engine.js';
import { guarded } from '../engine/guarded.js';
import { type TextEvent, TextGenerator } from '../engine/text-generation.js';
import { ChatTemplate } from '../model/chat-template.js';
import { loadModelFiles, type ModelFiles } from '../model/model-files.js';
import { Tokenizer } from '../model/tokenizer.js';

export interface ExecuteRequest {
  prompt: string | readonly number[];
  params: SamplingParams;
  stop?: readonly string[];
  priority?: number;
  tenant?: string;
  /** Aborts the request (client gone); the deadline is added here. */
  signal?: AbortSignal;
}

/** What one finished request did, in seconds since its arrival unless noted. */
export interface RequestRecord {
  promptTokens: number;
  outputTokens: number;
  finishReason: FinishReason | 'error';
  /** Arrival to first output token; undefined when none was produced. */
  ttft: number | undefined;
  /** Arrival to the end. */
  e2e: number;
  /** Gaps between consecutive output tokens. */
  interTokenLatencies: number[];
}

export interface RuntimeObserver {
  finished(record: RequestRecord): void;
  rejected(code: string): void;
}

export class InferenceRuntime {
  /** Requests admitted and not yet finished. */
  private live = 0;
  readonly generator: TextGenerator;

  private constructor(
    readonly engine: Engine,
    readonly tokenizer: Tokenizer,
    readonly files: ModelFiles,
    readonly modelName: string,
    private readonly config: Config,
    private readonly observer: RuntimeObserver | undefined,
  ) {
    this.generator = new TextGenerator(engine, tokenizer);
  }

  static async load(config: Config, observer?: RuntimeObserver): Promise<InferenceRuntime> {
    if (!config.modelDir)
      throw new StrataError('STRATA_MODEL_CONFIG', 'no model configured: set STRATA_MODEL_DIR');
    const files = await loadModelFiles(config.modelDir);
    const { engine: e } = config;
    const engine = await Engine.load({
      modelDir: config.modelDir,
      threads: e.threads,
      numBlocks: e.numBlocks,
      kvCacheBytes: e.kvCacheBytes,
      kvMemoryFraction: e.kvMemoryFraction,
      blockSize: e.blockSize,
      maxNumBatchedTokens: e.maxNumBatchedTokens,
      maxNumSeqs: e.maxNumSeqs,
      maxModelLen: e.maxModelLen,
    });
    const name = config.servedModelName ?? basename(config.modelDir);
    return new InferenceRuntime(engine, Tokenizer.fromModelFiles(files), files, name, config, observer);
  }

  get maxModelLen(): number {
    return this.engine.info.engine.maxModelLen;
  }

  /** Admitted requests still running or waiting. */
  get liveRequests(): number {
    return this.live;
  }

  /** The model's chat template; throws STRATA_NO_CHAT_TEMPLATE when it has none. */
  chatTemplate(): ChatTemplate {
    return ChatTemplate.fromModelFiles(this.files);
  }

  /** Rejects a request by `model` name that this backend does not serve. */
  checkModel(model: string | undefined): void {
    if (model !== undefined && model !== this.modelName) {
      throw new StrataError(
        'STRATA_MODEL_NOT_FOUND',
        `model "${model}" is not served here; this backend serves "${this.modelName}"`,
      );
    }
  }

  /**
   * Admits and submits one request, then returns its events. Rejects before anything runs for
   * a full queue (429), bad parameters or a prompt over the context (400); once it has started
   * every outcome ends the stream with a done event (finish_reason abort when the caller's
   * signal fired, timeout at the deadline).
   */
  async start(request: ExecuteRequest): Promise<AsyncIterableIterator<TextEvent>> {
    const capacity = this.config.engine.maxNumSeqs + this.config.limits.maxQueued;
    if (this.live >= capacity) {
      this.observer?.rejected('STRATA_QUEUE_FULL');
      throw new StrataError(
        'STRATA_QUEUE_FULL',
        `the backend holds ${capacity} requests (running + queued); retry later`,
      );
    }
    const arrival = performance.now();
    const controller = new AbortController();
    const deadline = setTimeout(() => controller.abort('timeout'), this.config.limits.requestTimeoutMs);
    const onCaller = () => controller.abort('abort');
    request.signal?.addEventListener('abort', onCaller, { once: true });
    const release = () => {
      clearTimeout(deadline);
      request.signal?.removeEventListener('abort', onCaller);
    };
    this.live++;
    let events: AsyncIterableIterator<TextEvent>;
    try {
      events = await this.generator.start({
        prompt: request.prompt,
        params: { maxTokens: this.config.limits.defaultMaxTokens, ...request.params },
        stop: request.stop ?? [],
        signal: controller.signal,
        ...(request.priority !== undefined ? { priority: request.priority } : {}),
        ...(request.tenant !== undefined ? { tenant: request.tenant } : {}),
      });
    } catch (err) {
      this.live--;
      release();
      this.observer?.rejected((err as { code?: string }).code ?? 'STRATA_INTERNAL');
      throw err;
    }
    if (request.signal?.aborted) onCaller();
    return guarded(this.timed(events, arrival, release), () => {
      this.live--;
      release();
      void events.return?.();
    });
  }

  private async *timed(
    events: AsyncIterableIterator<TextEvent>,
    arrival: number,
    release: () => void,
  ): AsyncGenerator<TextEvent> {
    const record: RequestRecord = {
      promptTokens: 0,
      outputTokens: 0,
      finishReason: 'error',
      ttft: undefined,
      e2e: 0,
      interTokenLatencies: [],
    };
    let last = arrival;
    try {
      for await (const event of events) {
        const now = performance.now();
        if (event.type === 'token') {
          if (record.ttft === undefined) record.ttft = (now - arrival) / 1e3;
          else record.interTokenLatencies.push((now - last) / 1e3);
          last = now;
        } else {
          record.promptTokens = event.usage.inputTokens;
          record.outputTokens = event.usage.outputTokens;
          record.finishReason = event.finishReason;
        }
        yield event;
      }
    } finally {
      this.live--;
      release();
      record.e2e = (performance.now() - arrival) / 1e3;
      this.observer?.finished(record);
    }
  }

  async close(): Promise<void> {
    await this.engine.close();
  }
}
