// The backend's execution core, shared by every route: the loaded model, admission control,
// per-request deadlines and cancellation, and per-request timings for metrics and logs.
import { readFile } from 'node:fs/promises';
import { basename } from 'node:path';
import { context, type Span, SpanKind, SpanStatusCode, type Tracer, trace } from '@opentelemetry/api';
import { type GrammarSpec, parentContext, StrataError } from '@strata/common';
import type { Config } from '../config.js';
import { Engine, type FinishReason, type SamplingParams } from '../engine/engine.js';
import { guarded } from '../engine/guarded.js';
import { type TextEvent, TextGenerator } from '../engine/text-generation.js';
import { ChatTemplate, withChatTemplateSetting } from '../model/chat-template.js';
import { loadModelFiles, type ModelFiles } from '../model/model-files.js';
import { Tokenizer } from '../model/tokenizer.js';
import type { NativeConstraint, NativeGrammar } from '../native.js';
import { defaultEngineThreads } from './cpu-budget.js';

export interface ExecuteRequest {
  prompt: string | ArrayLike<number>;
  params: SamplingParams;
  stop?: readonly string[];
  priority?: number;
  tenant?: string;
  /** The HTTP request's id, for the per-request log line and the span. */
  requestId?: string;
  /** The incoming W3C traceparent: the request's span becomes its child. */
  traceparent?: string;
  /** Aborts the request (client gone); the deadline is added here. */
  signal?: AbortSignal;
  /** The backend's own start-up traffic: kept out of the request metrics (see warmup.ts). */
  warmup?: boolean;
  /** Structured output: the grammar every output token must follow (compiled before admission). */
  grammar?: GrammarSpec;
}

/** Structured output's state on this backend: llguidance's version, or why there is none. */
export type GrammarStatus =
  | { available: true; version: string; loadSeconds: number }
  | { available: false; code: 'STRATA_GRAMMAR_UNAVAILABLE'; message: string };

/** What one finished request did, in seconds since its arrival unless noted. */
export interface RequestRecord {
  /** The backend's own start-up traffic, not a client's. */
  warmup: boolean;
  requestId: string | undefined;
  tenant: string | undefined;
  priority: number | undefined;
  promptTokens: number;
  outputTokens: number;
  finishReason: FinishReason | 'error';
  /** Arrival to first output token; undefined when none was produced. */
  ttft: number | undefined;
  /** Arrival to the end. */
  e2e: number;
  /** The arrival itself, on performance.now()'s clock in ms. */
  arrivedAt: number;
  /** Gaps between consecutive output tokens, as this process handed them on. */
  interTokenLatencies: number[];
  /**
   * When the engine sampled each output token, on performance.now()'s clock in ms: the engine's
   * own timing, before detokenization and delivery (benchmarks compare it with the client's).
   */
  sampledAt: number[];
  /** Arrival to the engine's first schedule of the request; undefined when never scheduled. */
  queueTime: number | undefined;
  /** First scheduled to first output token (prompt processing); undefined without both. */
  prefillTime: number | undefined;
  /** First to last output token; undefined when none was produced. */
  decodeTime: number | undefined;
}

/**
 * The model name this backend serves and reports (metrics label model_name, /load): the configured
 * one, else the model directory's name, or a GGUF file's name without .gguf.
 */
export function servedModelName(config: Config): string {
  if (config.servedModelName) return config.servedModelName;
  if (!config.modelDir) return 'none';
  const name = basename(config.modelDir);
  return /\.gguf$/i.test(name) && name.length > '.gguf'.length ? name.slice(0, -'.gguf'.length) : name;
}

/** The parent context named by a W3C traceparent header, or the root context. */

/** Per-request moments on performance.now()'s clock, shared by start() and the event stream. */
interface Moments {
  arrival: number;
  scheduled: number | undefined;
  firstToken: number | undefined;
  lastToken: number | undefined;
}

/** A performance.now() moment as epoch milliseconds (span event timestamps). */
const epochMs = (at: number) => performance.timeOrigin + at;
const ms = (from: number, to: number) => Math.max(0, to - from) / 1e3;

export interface RuntimeObserver {
  finished(record: RequestRecord): void;
  rejected(code: string): void;
  /** One engine step's forward pass: tokens computed (prefill chunks + decodes), sequences. */
  forward?(batchedTokens: number, batchedSeqs: number): void;
  /** The start-up warmup is over: what the engine did until now was warmup, not client traffic. */
  warmupDone?(): void;
}

/**
 * Requests admitted and not yet finished, counted across every event loop of the process (one
 * SharedArrayBuffer cell), so that admission and /load see all of them.
 */
export class LiveCounter {
  private readonly cell: Int32Array;
  constructor(readonly buffer: SharedArrayBuffer = new SharedArrayBuffer(4)) {
    this.cell = new Int32Array(buffer, 0, 1);
  }
  /** Counts one more unless `capacity` are live already (then false, and nothing counted). */
  tryAdd(capacity: number): boolean {
    if (Atomics.add(this.cell, 0, 1) < capacity) return true;
    Atomics.sub(this.cell, 0, 1);
    return false;
  }
  release(): void {
    Atomics.sub(this.cell, 0, 1);
  }
  get value(): number {
    return Atomics.load(this.cell, 0);
  }
}

/** What another thread needs to serve from this runtime's engine (InferenceRuntime.attach). */
export interface SharedRuntime {
  /** Engine.share()'s key. */
  engineKey: number;
  /** The LiveCounter's cell. */
  live: SharedArrayBuffer;
  grammar: GrammarStatus;
}

export class InferenceRuntime {
  readonly generator: TextGenerator;
  /** The name this backend serves and reports (servedModelName). */
  readonly modelName: string;

  private constructor(
    readonly engine: Engine,
    readonly tokenizer: Tokenizer,
    readonly files: ModelFiles,
    private readonly config: Config,
    private readonly observer: RuntimeObserver | undefined,
    private readonly tracer: Tracer,
    readonly grammar: GrammarStatus,
    /** Admitted requests of every event loop. */
    private readonly live: LiveCounter = new LiveCounter(),
  ) {
    this.generator = new TextGenerator(engine, tokenizer);
    this.modelName = servedModelName(config);
  }

  static async load(
    config: Config,
    observer?: RuntimeObserver,
    tracer: Tracer = trace.getTracer('inference-backend'),
    progress?: BigInt64Array,
  ): Promise<InferenceRuntime> {
    const files = await InferenceRuntime.files(config);
    const { engine: e } = config;
    // The tokenizer (and its encoding worker) and structured output's vocabulary load while the
    // engine loads on its native thread. Handled at once, so a failure waits for the engine's
    // outcome instead of going unhandled (readGrammar never rejects).
    const tokenizing = Tokenizer.open(files);
    tokenizing.catch(() => undefined);
    const grammarReading = readGrammar(files);
    const loading = Engine.load({
      progress,
      modelDir: config.modelDir ?? files.path,
      backend: e.backend,
      threads: e.threads || defaultEngineThreads(undefined, config.httpWorkers),
      numBlocks: e.numBlocks,
      kvCacheBytes: e.kvCacheBytes,
      kvMemoryFraction: e.kvMemoryFraction,
      dtype: e.dtype,
      kvCacheDtype: e.kvCacheDtype,
      cpuWeightsDtype: e.cpuWeightsDtype,
      cpuKernels: e.cpuKernels,
      gpuMemoryUtilization: e.gpuMemoryUtilization,
      cudaGraphs: e.cudaGraphs,
      gpuSampling: e.gpuSampling,
      blockSize: e.blockSize,
      maxNumBatchedTokens: e.maxNumBatchedTokens,
      maxNumSeqs: e.maxNumSeqs,
      maxModelLen: e.maxModelLen,
    });
    let engine: Engine;
    try {
      engine = await loading;
    } catch (err) {
      await tokenizing.then(
        (t) => t.close(),
        () => undefined,
      );
      throw err;
    }
    if (observer?.forward) engine.onForward = observer.forward.bind(observer);
    const tokenizer = await InferenceRuntime.tokenizer(tokenizing, engine);
    const grammar = useGrammar(engine, await grammarReading);
    return new InferenceRuntime(engine, tokenizer, files, config, observer, tracer, grammar);
  }

  /**
   * The runtime of another event loop (an HTTP worker thread) on the engine a runtime of this
   * process loaded (its share()): the same model files and a tokenizer of its own; requests
   * submitted here stream here; admission counts every loop's requests.
   */
  static async attach(
    config: Config,
    shared: SharedRuntime,
    observer?: RuntimeObserver,
    tracer: Tracer = trace.getTracer('inference-backend'),
  ): Promise<InferenceRuntime> {
    const files = await InferenceRuntime.files(config);
    const engine = Engine.attach(shared.engineKey);
    const tokenizer = await InferenceRuntime.tokenizer(Tokenizer.open(files), engine);
    return new InferenceRuntime(
      engine,
      tokenizer,
      files,
      config,
      observer,
      tracer,
      shared.grammar,
      new LiveCounter(shared.live),
    );
  }

  /** What attach() on another thread needs. */
  share(): SharedRuntime {
    return { engineKey: this.engine.share(), live: this.live.buffer, grammar: this.grammar };
  }

  private static async files(config: Config): Promise<ModelFiles> {
    if (!config.modelDir)
      throw new StrataError('STRATA_MODEL_CONFIG', 'no model configured: set STRATA_MODEL_DIR');
    const files = await loadModelFiles(config.modelDir);
    return config.chatTemplate ? withChatTemplateSetting(files, config.chatTemplate) : files;
  }

  /** The model's tokenizer with its encoding worker; closes `engine` when it cannot be opened. */
  private static async tokenizer(opening: Promise<Tokenizer>, engine: Engine): Promise<Tokenizer> {
    try {
      return await opening;
    } catch (err) {
      await engine.close();
      throw err;
    }
  }

  /**
   * Compiles a request's grammar off the JS thread. STRATA_INVALID_GRAMMAR (400) names what is
   * wrong with it; STRATA_GRAMMAR_UNAVAILABLE when this engine cannot constrain output at all.
   */
  private async compile(spec: GrammarSpec): Promise<NativeConstraint> {
    if (!this.grammar.available) throw new StrataError(this.grammar.code, this.grammar.message);
    try {
      return await this.engine.compileConstraint(spec.kind, spec.data);
    } catch (err) {
      const e = err as StrataError;
      if (e.code === 'STRATA_INVALID_GRAMMAR') throw new StrataError(e.code, `${spec.field}: ${e.message}`);
      throw err;
    }
  }

  get maxModelLen(): number {
    return this.engine.info.engine.maxModelLen;
  }

  /** The output budget of a request: its max_tokens, else the configured default. */
  maxTokens(requested: number | undefined): number {
    return requested ?? this.config.limits.defaultMaxTokens;
  }

  /** Admitted requests still running or waiting, on every event loop. */
  get liveRequests(): number {
    return this.live.value;
  }

  /** The model's chat template; throws STRATA_NO_CHAT_TEMPLATE when it has none. */
  chatTemplate(): ChatTemplate {
    return ChatTemplate.fromModelFiles(this.files, this.modelName);
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

  /** Requests admitted at once (running + queued); one more is refused with a 429. */
  get capacity(): number {
    return this.config.engine.maxNumSeqs + this.config.limits.maxQueued;
  }

  /**
   * Admits and submits one request, then returns its events. Rejects before anything runs for
   * a full queue (429), bad parameters or a prompt over the context (400); once it has started
   * every outcome ends the stream with a done event (finish_reason abort when the caller's
   * signal fired, timeout at the deadline).
   */
  async start(request: ExecuteRequest): Promise<AsyncIterableIterator<TextEvent>> {
    const span = this.tracer.startSpan(
      'inference.request',
      {
        kind: SpanKind.SERVER,
        attributes: {
          'gen_ai.request.model': this.modelName,
          ...(request.requestId !== undefined ? { 'strata.request_id': request.requestId } : {}),
          ...(request.tenant !== undefined ? { 'strata.tenant': request.tenant } : {}),
        },
      },
      parentContext(request.traceparent),
    );
    const reject = (code: string): void => {
      this.observer?.rejected(code);
      span.setAttribute('strata.error_code', code);
      span.setStatus({ code: SpanStatusCode.ERROR, message: code });
      span.end();
    };
    const capacity = this.capacity;
    if (!this.live.tryAdd(capacity)) {
      reject('STRATA_QUEUE_FULL');
      throw new StrataError(
        'STRATA_QUEUE_FULL',
        `the backend holds ${capacity} requests (running + queued); retry later`,
      );
    }
    let constraint: NativeConstraint | undefined;
    if (request.grammar) {
      try {
        constraint = await this.compile(request.grammar);
      } catch (err) {
        this.live.release();
        reject((err as { code?: string }).code ?? 'STRATA_INTERNAL');
        throw err;
      }
    }
    const moments: Moments = {
      arrival: performance.now(),
      scheduled: undefined,
      firstToken: undefined,
      lastToken: undefined,
    };
    const controller = new AbortController();
    const deadline = setTimeout(() => controller.abort('timeout'), this.config.limits.requestTimeoutMs);
    const onCaller = () => controller.abort('abort');
    request.signal?.addEventListener('abort', onCaller, { once: true });
    const release = () => {
      clearTimeout(deadline);
      request.signal?.removeEventListener('abort', onCaller);
    };
    let events: AsyncIterableIterator<TextEvent>;
    try {
      events = await context.with(trace.setSpan(context.active(), span), () =>
        this.generator.start({
          prompt: request.prompt,
          params: {
            ...request.params,
            maxTokens: this.maxTokens(request.params.maxTokens),
          },
          stop: request.stop ?? [],
          signal: controller.signal,
          onScheduled: (at) => {
            moments.scheduled = at;
            span.addEvent('scheduled', { 'strata.queue_time_s': ms(moments.arrival, at) }, epochMs(at));
          },
          ...(request.priority !== undefined ? { priority: request.priority } : {}),
          ...(request.tenant !== undefined ? { tenant: request.tenant } : {}),
          ...(constraint ? { constraint } : {}),
        }),
      );
    } catch (err) {
      this.live.release();
      release();
      reject((err as { code?: string }).code ?? 'STRATA_INTERNAL');
      throw err;
    }
    span.addEvent('queued');
    if (request.signal?.aborted) onCaller();
    return guarded(this.timed(events, request, moments, span, release), () => {
      this.live.release();
      release();
      void events.return?.();
      span.addEvent('finished', { 'strata.finish_reason': 'abort' });
      span.end();
    });
  }

  private async *timed(
    events: AsyncIterableIterator<TextEvent>,
    request: ExecuteRequest,
    moments: Moments,
    span: Span,
    release: () => void,
  ): AsyncGenerator<TextEvent> {
    const record: RequestRecord = {
      warmup: request.warmup === true,
      requestId: request.requestId,
      tenant: request.tenant,
      priority: request.priority,
      promptTokens: 0,
      outputTokens: 0,
      finishReason: 'error',
      ttft: undefined,
      e2e: 0,
      arrivedAt: moments.arrival,
      interTokenLatencies: [],
      sampledAt: [],
      queueTime: undefined,
      prefillTime: undefined,
      decodeTime: undefined,
    };
    const { arrival } = moments;
    try {
      for await (const event of events) {
        const now = performance.now();
        if (event.type === 'token') {
          if (moments.lastToken === undefined) {
            moments.firstToken = now;
            record.ttft = ms(arrival, now);
            span.addEvent('first_token');
          } else {
            record.interTokenLatencies.push(ms(moments.lastToken, now));
          }
          moments.lastToken = now;
          record.sampledAt.push(event.sampledAt);
        } else {
          record.promptTokens = event.usage.inputTokens;
          record.outputTokens = event.usage.outputTokens;
          record.finishReason = event.finishReason;
        }
        yield event;
      }
    } catch (err) {
      span.recordException(err as Error);
      throw err;
    } finally {
      this.live.release();
      release();
      const end = performance.now();
      record.e2e = ms(arrival, end);
      const { scheduled, firstToken, lastToken } = moments;
      if (scheduled !== undefined) record.queueTime = ms(arrival, scheduled);
      if (scheduled !== undefined && firstToken !== undefined) record.prefillTime = ms(scheduled, firstToken);
      if (firstToken !== undefined && lastToken !== undefined) record.decodeTime = ms(firstToken, lastToken);
      this.endSpan(span, record);
      this.observer?.finished(record);
    }
  }

  private endSpan(span: Span, record: RequestRecord): void {
    span.setAttributes({
      'gen_ai.usage.input_tokens': record.promptTokens,
      'gen_ai.usage.output_tokens': record.outputTokens,
      'gen_ai.response.finish_reasons': [record.finishReason],
      ...(record.ttft !== undefined ? { 'strata.ttft_s': record.ttft } : {}),
      ...(record.queueTime !== undefined ? { 'strata.queue_time_s': record.queueTime } : {}),
      ...(record.prefillTime !== undefined ? { 'strata.prefill_time_s': record.prefillTime } : {}),
      ...(record.decodeTime !== undefined ? { 'strata.decode_time_s': record.decodeTime } : {}),
      'strata.e2e_s': record.e2e,
    });
    span.addEvent('finished', { 'strata.finish_reason': record.finishReason });
    if (record.finishReason === 'error') span.setStatus({ code: SpanStatusCode.ERROR });
    span.end();
  }

  async close(): Promise<void> {
    await this.engine.close();
    await this.tokenizer.close();
  }
}

type GrammarReading =
  | { ok: true; grammar: NativeGrammar; version: string; seconds: number }
  | { ok: false; code?: unknown; message: string };

/**
 * Structured output's vocabulary: llguidance reads each token's bytes from the model's
 * tokenizer.json (a GGUF's converted one included), off the JS thread and while the engine loads.
 * Never rejects: a failure becomes the reason constrained requests are refused.
 */
async function readGrammar(files: ModelFiles): Promise<GrammarReading> {
  try {
    const source = files.tokenizer;
    const json = source.kind === 'json' ? source.json : await readFile(source.path, 'utf8');
    return { ok: true, ...(await Engine.loadGrammar(json, files.vocabSize, files.eosTokenIds)) };
  } catch (err) {
    const e = err as { code?: unknown; message?: unknown };
    return { ok: false, code: e.code, message: String(e.message ?? err) };
  }
}

/**
 * The engine's structured output over what readGrammar() read. A failure leaves the backend
 * serving everything else and refusing constrained requests with the reason.
 */
function useGrammar(engine: Engine, reading: GrammarReading): GrammarStatus {
  const unavailable = (code: unknown, message: string): GrammarStatus => ({
    available: false,
    code: 'STRATA_GRAMMAR_UNAVAILABLE',
    message:
      code === 'STRATA_GRAMMAR_UNAVAILABLE'
        ? message
        : `structured output is unavailable: the grammar engine cannot read this model's vocabulary (${message})`,
  });
  if (!reading.ok) return unavailable(reading.code, reading.message);
  try {
    engine.useGrammar(reading.grammar);
  } catch (err) {
    const e = err as { code?: unknown; message?: unknown };
    return unavailable(e.code, String(e.message ?? err));
  }
  return { available: true, version: reading.version, loadSeconds: reading.seconds };
}
