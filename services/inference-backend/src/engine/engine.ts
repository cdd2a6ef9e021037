// The typed face of the native engine: load a model, generate() a token stream per request,
// abort, stats, close. Token level only: text, stop strings and chat live above this.
import { type ErrorCode, isErrorCode, StrataError } from '@strata/common';
import {
  type ConstraintKind,
  loadNativeAddon,
  type NativeAddon,
  type NativeConstraint,
  type NativeEngine,
  type NativeEngineInfo,
  type NativeEngineStats,
  type NativeGrammar,
  type NativeLoadOptions,
  type NativeSamplingParams,
  type NativeStep,
} from '../native.js';
import { TokenStream } from './token-stream.js';

export type FinishReason = 'stop' | 'length' | 'abort' | 'timeout';
const FINISH_REASONS: readonly (FinishReason | undefined)[] = [
  undefined,
  'stop',
  'length',
  'abort',
  'timeout',
];

export interface TopLogprob {
  token: number;
  logprob: number;
}

export interface GeneratedToken {
  /** Absent on a final event that carries no token (abort, timeout). */
  token?: number;
  /** When the engine sampled the token, on performance.now()'s clock (set with `token`). */
  sampledAt?: number;
  logprob?: number;
  topLogprobs?: TopLogprob[];
  /** Set on the request's last event. */
  finishReason?: FinishReason;
}

export interface GenerateOptions {
  priority?: number;
  tenant?: string;
  /** Aborting finishes the stream with finishReason 'abort' (or 'timeout' if the reason says so). */
  signal?: AbortSignal;
  /** Called once, when the engine first batches the request; `at` is on performance.now()'s clock. */
  onScheduled?: (at: number) => void;
  /** Structured output: every token must be one this grammar allows (compileConstraint()). */
  constraint?: NativeConstraint;
}

/** A native error with its stable catalogue code, e.g. STRATA_INVALID_PARAM. */
export class EngineError extends StrataError {
  constructor(code: ErrorCode, message: string) {
    super(code, message);
    this.name = 'EngineError';
  }
}

function asEngineError(err: unknown): EngineError {
  if (err instanceof EngineError) return err;
  const e = err as { code?: unknown; message?: unknown };
  // Every native code is catalogued (test/error-codes.test.ts); anything else is an engine bug.
  return new EngineError(isErrorCode(e.code) ? e.code : 'STRATA_ENGINE_ERROR', String(e.message ?? err));
}

export type EngineOptions = NativeLoadOptions;
export type SamplingParams = NativeSamplingParams;

export class Engine {
  private readonly streams = new Map<number, TokenStream<GeneratedToken>>();
  /** Per live request: detaches its AbortSignal listener once the request has finished. */
  private readonly cleanups = new Map<number, () => void>();
  private readonly onScheduled = new Map<number, (at: number) => void>();
  private nextId = 1;
  private fatal: EngineError | undefined;
  /** Called once per engine step that ran a forward pass (metrics: vllm:iteration_tokens_total). */
  onForward: ((batchedTokens: number, batchedSeqs: number) => void) | undefined;
  private closed = false;

  private constructor(
    private readonly native: NativeEngine,
    readonly info: NativeEngineInfo,
  ) {}

  static async load(options: EngineOptions, addon: NativeAddon = loadNativeAddon()): Promise<Engine> {
    const steps = Engine.deliveries();
    const native = await addon.loadEngine(options, steps.onSteps).catch((err: unknown) => {
      throw asEngineError(err);
    });
    return steps.bind(native);
  }

  /**
   * This thread's own engine on one another thread loaded (its share() key): requests submitted
   * here stream here, on this thread's event loop. Throws EngineError STRATA_ENGINE_CLOSED when
   * that engine is closed.
   */
  static attach(key: number, addon: NativeAddon = loadNativeAddon()): Engine {
    const steps = Engine.deliveries();
    try {
      return steps.bind(addon.attachEngine(key, steps.onSteps));
    } catch (err) {
      throw asEngineError(err);
    }
  }

  /** The onSteps callback for a native engine not yet made, and the binding of the two. */
  private static deliveries() {
    let engine: Engine | undefined;
    return {
      onSteps: (steps: NativeStep[]) => {
        // A delivery always follows a submit, so `engine` is set by the time one arrives.
        try {
          for (const step of steps) engine?.dispatch(step);
        } finally {
          // The next delivery waits for the next event-loop turn: timers and sockets run between.
          setImmediate(() => engine?.native.resumeSteps());
        }
      },
      bind: (native: NativeEngine) => {
        engine = new Engine(native, native.info());
        return engine;
      },
    };
  }

  /** The key other threads attach() to this engine with. */
  share(): number {
    return this.native.share();
  }

  /**
   * Submits a request and returns its token stream. Throws EngineError at once for bad input
   * (STRATA_INVALID_PARAM, STRATA_PROMPT_TOO_LONG, ...), so nothing is queued for it.
   */
  generate(
    prompt: ArrayLike<number>,
    params: SamplingParams = {},
    options: GenerateOptions = {},
  ): TokenStream<GeneratedToken> {
    if (this.closed) throw new EngineError('STRATA_ENGINE_CLOSED', 'the engine is closed');
    if (this.fatal) throw this.fatal;
    const id = this.nextId++;
    const stream = new TokenStream<GeneratedToken>(() => {
      this.forget(id);
      this.native.abort(id, 'abort');
    });
    try {
      this.native.submit({
        id,
        prompt: prompt instanceof Int32Array ? prompt : Int32Array.from(prompt), // the addon copies it
        params,
        ...(options.priority !== undefined ? { priority: options.priority } : {}),
        ...(options.tenant !== undefined ? { tenant: options.tenant } : {}),
        ...(options.constraint !== undefined ? { constraint: options.constraint } : {}),
      });
    } catch (err) {
      throw asEngineError(err);
    }
    this.streams.set(id, stream);
    if (options.onScheduled) this.onScheduled.set(id, options.onScheduled);
    const signal = options.signal;
    if (signal) {
      const onAbort = () => this.native.abort(id, signal.reason === 'timeout' ? 'timeout' : 'abort');
      if (signal.aborted) onAbort();
      else {
        signal.addEventListener('abort', onAbort, { once: true });
        this.cleanups.set(id, () => signal.removeEventListener('abort', onAbort));
      }
    }
    return stream;
  }

  /**
   * Structured output's vocabulary read from a model's tokenizer.json text, off the JS thread and
   * with no engine (NativeAddon.loadGrammar), so it can run while the engine loads; an engine's
   * useGrammar() takes it.
   */
  static async loadGrammar(
    tokenizerJson: string,
    vocabSize: number,
    eosTokenIds: readonly number[],
    addon: NativeAddon = loadNativeAddon(),
  ): Promise<{ grammar: NativeGrammar; version: string; seconds: number }> {
    try {
      return await addon.loadGrammar(tokenizerJson, vocabSize, eosTokenIds);
    } catch (err) {
      throw asEngineError(err);
    }
  }

  /** Structured output over `grammar` (see NativeEngine.useGrammar). */
  useGrammar(grammar: NativeGrammar): void {
    try {
      this.native.useGrammar(grammar);
    } catch (err) {
      throw asEngineError(err);
    }
  }

  /**
   * Reads this model's vocabulary (its own size and end-of-sequence ids, with `eosTokenIds`) and
   * uses it: loadGrammar() and useGrammar() one after the other.
   */
  async loadGrammar(
    tokenizerJson: string,
    eosTokenIds: readonly number[],
  ): Promise<{ version: string; seconds: number }> {
    const { model } = this.info;
    const eos = [...new Set([...model.eosTokenIds, ...eosTokenIds])];
    const { grammar, version, seconds } = await Engine.loadGrammar(tokenizerJson, model.vocabSize, eos);
    this.useGrammar(grammar);
    return { version, seconds };
  }

  /** One request's constraint, compiled off the JS thread; STRATA_INVALID_GRAMMAR names what is wrong. */
  async compileConstraint(kind: ConstraintKind, data: string): Promise<NativeConstraint> {
    if (this.closed) throw new EngineError('STRATA_ENGINE_CLOSED', 'the engine is closed');
    try {
      return await this.native.compileConstraint(kind, data);
    } catch (err) {
      throw asEngineError(err);
    }
  }

  stats(): NativeEngineStats {
    return this.native.stats();
  }

  /** Requests still streaming. */
  get liveRequests(): number {
    return this.streams.size;
  }

  /**
   * Fails every live stream with STRATA_ENGINE_CLOSED and stops the engine loop; an attached
   * engine only detaches its thread (the engine runs on for the others).
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const error = new EngineError('STRATA_ENGINE_CLOSED', 'the engine was closed while the request ran');
    for (const [id, stream] of this.streams) {
      stream.fail(error);
      this.forget(id);
    }
    await this.native.close();
  }

  private dispatch(step: NativeStep): void {
    if (step.batchedTokens > 0) this.onForward?.(step.batchedTokens, step.batchedSeqs);
    if (step.scheduledIds.length > 0) {
      const at = performance.now() - step.scheduledAgeMs;
      for (const id of step.scheduledIds) {
        const callback = this.onScheduled.get(id);
        this.onScheduled.delete(id);
        callback?.(at);
      }
    }
    const sampledAt = performance.now() - step.outputAgeMs;
    for (let i = 0; i < step.ids.length; i++) {
      const id = step.ids[i] as number;
      const stream = this.streams.get(id);
      if (!stream) continue; // cancelled by its consumer
      const event: GeneratedToken = { token: step.tokens[i] as number, sampledAt };
      const logprob = step.logprobs[i] as number;
      if (!Number.isNaN(logprob)) {
        event.logprob = logprob;
        const offset = step.topOffsets[i] as number;
        const count = step.topCounts[i] as number;
        if (count > 0) {
          event.topLogprobs = Array.from({ length: count }, (_, k) => ({
            token: step.topIds[offset + k] as number,
            logprob: step.topLogprobs[offset + k] as number,
          }));
        }
      }
      const finish = FINISH_REASONS[step.finish[i] as number];
      if (finish) event.finishReason = finish;
      stream.push(event);
      if (finish) {
        stream.end();
        this.forget(id);
      }
    }
    for (let i = 0; i < step.abortedIds.length; i++) {
      const id = step.abortedIds[i] as number;
      const stream = this.streams.get(id);
      if (!stream) continue;
      stream.push({ finishReason: FINISH_REASONS[step.abortedReasons[i] as number] ?? 'abort' });
      stream.end();
      this.forget(id);
    }
    if (step.fatal) {
      this.fatal = asEngineError(step.fatal);
      for (const [id, stream] of this.streams) {
        stream.fail(this.fatal);
        this.forget(id);
      }
    }
  }

  private forget(id: number): void {
    this.streams.delete(id);
    this.cleanups.get(id)?.();
    this.cleanups.delete(id);
    this.onScheduled.delete(id);
  }
}
