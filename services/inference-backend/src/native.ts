// The hand-written contract of strata_native.node (native/addon/*.cpp). Keep in step with
// the C++ side: every function and field here exists there.
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface NativeBuildInfo {
  napiVersion: number;
  /** The addon contains device code compiled by nvcc. */
  cuda: boolean;
  /** SM architectures compiled for, e.g. "80;89;90" (CUDA builds only). */
  cudaArchs?: string;
  /** nvcc release, e.g. "release 13.0" (CUDA builds only). */
  nvcc?: string;
  /** Host C++ compiler version string. */
  compiler: string;
  /** Structured output is built in (llguidance; cargo was found at build time). */
  grammar: boolean;
  /** llguidance's version line, when `grammar`. */
  llguidance?: string;
}

export interface CudaDeviceInfo {
  index: number;
  name: string;
  /** e.g. "9.0" for Hopper. */
  computeCapability: string;
  totalMemoryBytes: number;
}

export interface CudaInfo {
  compiled: boolean;
  available: boolean;
  /** Why no device is usable, e.g. "no CUDA device: CUDA driver version is insufficient ...". */
  reason?: string;
  devices: CudaDeviceInfo[];
  /** A test kernel ran on device 0 and produced the expected values. */
  smokeKernelOk: boolean;
}

/** loadEngine() options (strata::RunnerOptions, native/engine/runner/include/strata/engine_runner.h). */
export interface NativeLoadOptions {
  /**
   * Written by the load while it runs (atomically, from its thread): [0] the checkpoint's bytes
   * read so far, [1] its bytes in all (0 until known); both equal once the weights are in.
   */
  progress?: BigInt64Array;
  /** 'cpu' (default) or 'cuda'; a backend this build or machine cannot run fails the load. */
  backend?: 'cpu' | 'cuda';
  /**
   * The model: a Hugging Face directory, a .gguf file, or a directory holding one .gguf file and no
   * config.json (the paths loadModelFiles accepts); or leave empty and name a dummyPreset.
   */
  modelDir?: string;
  /** Random weights for a named shape, e.g. "llama-3-8b" (benchmarks). */
  dummyPreset?: string;
  dummySeed?: number;
  /** Threads computing a step; 0 = every CPU. */
  threads?: number;
  /** KV pool size in blocks; 0 = from kvCacheBytes or kvMemoryFraction. */
  numBlocks?: number;
  /** Tokens per KV block (default 16). */
  blockSize?: number;
  maxNumBatchedTokens?: number;
  maxNumSeqs?: number;
  /** 0 = the model's max_position_embeddings. */
  maxModelLen?: number;
  /** KV pool budget in bytes; 0 = kvMemoryFraction of MemAvailable. */
  kvCacheBytes?: number;
  kvMemoryFraction?: number;
  /** CUDA backend: bfloat16 (default), float16 or float32; the CPU backend is always float32. */
  dtype?: 'bfloat16' | 'float16' | 'float32';
  /**
   * The KV pool's elements. CPU: 'auto' (default) = float16 for a GGUF model's quantized weights (as
   * llama.cpp), float32 otherwise; or either by name. CUDA: its dtype ('auto' or that name).
   */
  kvCacheDtype?: 'auto' | 'float32' | 'float16' | 'bfloat16';
  /**
   * CPU backend: a checkpoint's bfloat16/float16 matrices kept as they are ('auto', default; the
   * GEMM widens them exactly as it reads them) or widened to float32 at load; the same logits.
   */
  cpuWeightsDtype?: 'auto' | 'float32';
  /**
   * CPU backend: the kernel set ('auto', default: the fastest exact one; 'amx': AMX tile
   * multiplies for bf16 matrices, bf16 activations, where the CPU has AMX, else auto; 'avx2',
   * 'portable'). Unset: STRATA_CPU_KERNELS.
   */
  cpuKernels?: 'auto' | 'amx' | 'avx2' | 'portable';
  /** CUDA backend: share of the GPU's memory for weights, activations and the KV pool (0.9). */
  gpuMemoryUtilization?: number;
  /** CUDA backend: replay CUDA graphs for decode steps of up to 256 sequences (default true). */
  cudaGraphs?: boolean;
  /** CUDA backend: sample on the GPU, so only tokens cross to the host (default true). */
  gpuSampling?: boolean;
}

/** core/include/strata/sampling_params.h; validated natively at submit. */
export interface NativeSamplingParams {
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  repetitionPenalty?: number;
  frequencyPenalty?: number;
  presencePenalty?: number;
  /** Integer below 2^53. */
  seed?: number;
  stopTokenIds?: number[];
  ignoreEos?: boolean;
  maxTokens?: number;
  minTokens?: number;
  /** -1 none, 0 the sampled token's, n also the top n (at most 20). */
  logprobs?: number;
  /** Logprobs of the distribution sampled from (after penalties, temperature, truncation) instead of the raw logits. */
  processedLogprobs?: boolean;
}

export interface NativeRequest {
  /** Unique among this engine's live requests; at most 2^47 - 1. */
  id: number;
  prompt: Int32Array;
  /** Lower is more urgent; FCFS within a priority. */
  priority?: number;
  /** Prefix-cache namespace: blocks are shared only within one tenant. */
  tenant?: string;
  params?: NativeSamplingParams;
  /** Structured output: from compileConstraint(); each may be submitted once. */
  constraint?: NativeConstraint;
}

/** What compileConstraint() accepts (grammar.h): llguidance's constraint kinds. */
export type ConstraintKind = 'json_schema' | 'json_object' | 'regex' | 'lark';

/** One request's compiled grammar state, opaque to JS. */
export interface NativeConstraint {
  readonly handle: unknown;
  /** Time compiling it took, off the JS thread. */
  readonly compileSeconds: number;
}

/** Structured output's vocabulary as loadGrammar() read it, opaque to JS; an engine's useGrammar() takes it. */
export interface NativeGrammar {
  readonly __brand: 'NativeGrammar';
}

/** FinishReason in sequence.h: 0 none, 1 stop, 2 length, 3 abort, 4 timeout. */
export type NativeFinishCode = 0 | 1 | 2 | 3 | 4;

/** One engine step, column-wise: entry i of each per-token array belongs to one token. */
export interface NativeStep {
  ids: Float64Array;
  tokens: Int32Array;
  finish: Uint8Array;
  /** NaN when the request asked for no logprobs. */
  logprobs: Float32Array;
  /** Token i's top logprobs are topIds/topLogprobs[topOffsets[i], +topCounts[i]). */
  topOffsets: Int32Array;
  topCounts: Int32Array;
  topIds: Int32Array;
  topLogprobs: Float32Array;
  /** Requests finished without a token this step (abort or timeout). */
  abortedIds: Float64Array;
  abortedReasons: Uint8Array;
  /** Requests batched for the first time in this step (never repeated after a preemption). */
  scheduledIds: Float64Array;
  /** How long before this call the step was scheduled, in ms (0 when scheduledIds is empty). */
  scheduledAgeMs: number;
  /** How long before this call the step's tokens were sampled, in ms (0 when tokens is empty). */
  outputAgeMs: number;
  /** The step's forward pass: tokens computed (prefill chunks + decodes), 0 when it ran none. */
  batchedTokens: number;
  /** Sequences in that forward pass. */
  batchedSeqs: number;
  /** Set when the step failed: the loop has stopped and every live request is lost. */
  fatal?: Error & { code: string };
}

export interface NativeEngineStats {
  numWaiting: number;
  numRunning: number;
  kvBlocksTotal: number;
  kvBlocksFree: number;
  kvBlocksUsed: number;
  kvBlocksCached: number;
  /** Used blocks / total, in [0, 1]. */
  kvUsage: number;
  numPreemptions: number;
  /** In tokens, like vLLM. */
  prefixCacheQueries: number;
  prefixCacheHits: number;
  numSteps: number;
  finishedStop: number;
  finishedLength: number;
  finishedAbort: number;
  finishedTimeout: number;
  /** Structured output: masks computed, seconds computing them (overlapped with the forward pass),
   * seconds steps waited for them after the forward, and requests ended by a failed constraint. */
  constraintMasks: number;
  constraintMaskSeconds: number;
  constraintWaitSeconds: number;
  constraintErrors: number;
}

export interface NativeEngineInfo {
  model: {
    architecture: string;
    vocabSize: number;
    hiddenSize: number;
    numLayers: number;
    numHeads: number;
    numKvHeads: number;
    headDim: number;
    maxPositionEmbeddings: number;
    bosTokenId: number;
    eosTokenIds: number[];
  };
  engine: {
    numBlocks: number;
    blockSize: number;
    maxNumBatchedTokens: number;
    maxNumSeqs: number;
    maxModelLen: number;
    kvBytesPerBlock: number;
  };
  backend: 'cpu' | 'cuda';
  /** CPU kernels chosen at run time: "amx-bf16", "avx512f", "avx2+fma" or "portable" (and the quantized set, for GGUF blocks); "cuda" on the CUDA backend. */
  kernelIsa: string;
  /** "cpu", or the GPU's name. */
  device: string;
  /** Activations (and the weights unless quantized): float32 on the CPU backend. */
  dtype: 'float32' | 'bfloat16' | 'float16';
  /** The KV pool's elements (kvCacheDtype resolved): the CPU backend's float32 or float16, the CUDA backend's dtype. */
  kvCacheDtype: 'float32' | 'bfloat16' | 'float16';
  /** The weights' format: the dtype, or the block types of a GGUF's quantized matrices ("Q4_1 + Q8_0"). */
  weights: string;
  threads: number;
  loadSeconds: number;
  /** Checkpoint bytes per second while loading (the CUDA backend's copy to the device); 0 when not measured. */
  loadGBPerSecond: number;
  /** Where tokens are sampled: the GPU by default on the CUDA backend (STRATA_GPU_SAMPLING). */
  sampling: 'cpu' | 'gpu';
  /** Why sampling is on the CPU although the GPU was configured (e.g. a vocabulary too large for it). */
  samplingNote?: string;
  /**
   * The CUDA backend: how a decode step of one sequence runs its q/k/v and gate/up projections
   * and the kernels after them, e.g. "q/k/v quant_gemm_qkv_rope, gate/up quant_gemm_swiglu".
   */
  decodeKernels?: string;
}

export interface NativeEngine {
  /** Throws an Error with `code` (STRATA_INVALID_PARAM, STRATA_PROMPT_TOO_LONG, ...). */
  submit(request: NativeRequest): void;
  /** False when the id is not live; its finish is (or was) reported the other way. */
  abort(id: number, reason?: 'abort' | 'timeout'): boolean;
  stats(): NativeEngineStats;
  info(): NativeEngineInfo;
  /**
   * The engine that loaded the model: stops the loop; requests still live are dropped without a
   * final event, and those of attached engines fail with STRATA_ENGINE_CLOSED. An attached
   * engine: detaches this thread only, aborting its live requests.
   */
  close(): Promise<void>;
  /** Lets the next onSteps call come: steps that arrived meanwhile, or the next one. */
  resumeSteps(): void;
  /**
   * A key naming this engine's runner to attachEngine() on another thread of this process
   * (worker_threads), so several event loops submit to and stream from one engine.
   */
  share(): number;
  /**
   * Structured output over the vocabulary loadGrammar() read, for this engine and every thread's
   * attached to its runner. Throws STRATA_INVALID_CONFIG when it was read for another vocabulary
   * size or without one of the model's end-of-sequence ids.
   */
  useGrammar(grammar: NativeGrammar): void;
  /** Compiles one request's constraint (off the JS thread); rejects with STRATA_INVALID_GRAMMAR. */
  compileConstraint(kind: ConstraintKind, data: string): Promise<NativeConstraint>;
}

export interface NativeAddon {
  buildInfo(): NativeBuildInfo;
  cudaInfo(): CudaInfo;
  /**
   * Loads the model off the JS thread. onSteps then gets, in order, every engine step with output
   * that accumulated since its last call: one step while the event loop keeps up, several when it
   * is busy (at most 64 wait before the engine pauses for JS). After each call, nothing more is
   * delivered until the engine's resumeSteps() is called, from a later event-loop turn.
   */
  loadEngine(options: NativeLoadOptions, onSteps: (steps: NativeStep[]) => void): Promise<NativeEngine>;
  /**
   * This thread's own engine on a runner another thread loaded (its share() key): its own
   * request ids (no clash with any other thread's), and onSteps gets its requests' steps only,
   * on this thread's event loop, as loadEngine's does. Up to 63 threads attach at once.
   * Throws STRATA_ENGINE_CLOSED when no open engine has that key.
   */
  attachEngine(key: number, onSteps: (steps: NativeStep[]) => void): NativeEngine;
  /**
   * Reads a model's vocabulary for structured output (off the JS thread) from its tokenizer.json
   * text, for a model of `vocabSize` logits whose outputs end at any of `eosTokenIds`: no engine
   * needed, so it can run while the engine loads. Rejects with STRATA_GRAMMAR_UNAVAILABLE when the
   * addon was built without llguidance, STRATA_INVALID_CONFIG when llguidance cannot read it.
   */
  loadGrammar(
    tokenizerJson: string,
    vocabSize: number,
    eosTokenIds: readonly number[],
  ): Promise<{ grammar: NativeGrammar; version: string; seconds: number }>;
}

const packageRoot = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Loads the addon from build/Release (or from STRATA_NATIVE_ADDON, a .node path). */
export function loadNativeAddon(path = process.env.STRATA_NATIVE_ADDON): NativeAddon {
  const file = path ?? join(packageRoot, 'build', 'Release', 'strata_native.node');
  return createRequire(import.meta.url)(file) as NativeAddon;
}
