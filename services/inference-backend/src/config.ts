import {
  baseServiceEnv,
  baseServiceSchema,
  configFields,
  DEFAULT_MAX_TOKENS,
  type EnvMap,
  identityConfigSchema,
  identityEnv,
} from '@strata/common';
import { z } from 'zod';

const nonNegativeInt = (fallback: number) => z.coerce.number().int().min(0).default(fallback);

export const configSchema = baseServiceSchema.extend({
  port: configFields.port(8000),
  /**
   * The model: a Hugging Face directory, a .gguf file, or a directory holding one .gguf file and no
   * config.json. Without one the service runs but never turns ready.
   */
  modelDir: z.string().min(1).optional(),
  /** The name clients use in `model`; defaults to the directory's name (a GGUF file's name without .gguf). */
  servedModelName: z.string().min(1).optional(),
  /**
   * The chat template, replacing the model's own (vLLM's --chat-template): the path of a Jinja file,
   * or the template text itself. It must parse, or the model fails to load.
   */
  chatTemplate: z.string().min(1).optional(),
  engine: z
    .object({
      /** Model backend: cpu (every machine) or cuda (NVIDIA GPUs; see docs/engine.md for its state). */
      backend: z.enum(['cpu', 'cuda']).default('cpu'),
      /** CPU engine compute threads; 0 = every CPU the process may use (cgroup limit included) but one, at least 1. */
      threads: nonNegativeInt(0),
      /** KV pool in blocks; 0 = from kvCacheBytes, else kvMemoryFraction of available memory. */
      numBlocks: nonNegativeInt(0),
      kvCacheBytes: nonNegativeInt(0),
      kvMemoryFraction: z.coerce.number().gt(0).max(0.95).default(0.2),
      /** CUDA backend: weights, activations and KV dtype (the CPU backend computes in float32). */
      dtype: z.enum(['bfloat16', 'float16', 'float32']).default('bfloat16'),
      /**
       * The KV cache's elements (vLLM's --kv-cache-dtype). CPU: auto = float16 for a GGUF model's
       * quantized weights (as llama.cpp: half the memory and the bytes attention reads), float32
       * otherwise; float32 or float16 by name. CUDA: auto or its dtype.
       */
      kvCacheDtype: z.enum(['auto', 'float32', 'float16', 'bfloat16']).default('auto'),
      /**
       * CPU backend: a checkpoint's bfloat16/float16 matrices kept as they are (auto: half the
       * memory, faster decode at 1-2 sequences) or widened to float32 at load (11-25% faster at
       * 8 sequences, up to 11% at 32, on a Zen 4 class CPU); the logits are the same bits either way.
       */
      cpuWeightsDtype: z.enum(['auto', 'float32']).default('auto'),
      /**
       * CPU backend: the kernel set. auto: the fastest exact set the CPU runs (AVX-512 or AVX2,
       * the same bits; portable elsewhere). amx: on a CPU with AMX (Intel Xeon 4th gen and later),
       * a bf16 checkpoint's matrices multiply in AMX tiles with bf16-rounded activations, as on a
       * GPU (other bits; elsewhere auto). avx2 or portable: a lesser exact set, to compare.
       */
      cpuKernels: z.enum(['auto', 'amx', 'avx2', 'portable']).default('auto'),
      /** CUDA backend: share of the GPU's memory for weights, activations and the KV pool. */
      gpuMemoryUtilization: z.coerce.number().gt(0).max(1).default(0.9),
      /** CUDA backend: decode steps replay CUDA graphs (false: every step eager, as vLLM's --enforce-eager). */
      cudaGraphs: configFields.boolean(true),
      /** CUDA backend: sample on the GPU (false: the logits go to the host and the CPU sampler). */
      gpuSampling: configFields.boolean(true),
      blockSize: z.coerce.number().int().min(1).max(256).default(16),
      maxNumBatchedTokens: configFields.positiveInt(2048),
      maxNumSeqs: configFields.positiveInt(256),
      /** 0 = the model's max_position_embeddings. */
      maxModelLen: nonNegativeInt(0),
    })
    .prefault({}),
  limits: z
    .object({
      /** Requests admitted beyond maxNumSeqs to wait in the engine; past that, 429. */
      maxQueued: nonNegativeInt(256),
      /** Per-request deadline in ms; on expiry the request ends with finish_reason "timeout". */
      requestTimeoutMs: configFields.positiveInt(120_000),
      /** max_tokens when a request gives none, on every route (vLLM's and OpenAI's default). */
      defaultMaxTokens: configFields.positiveInt(DEFAULT_MAX_TOKENS),
      /** Idle SSE streams get a comment line this often, in ms. */
      sseHeartbeatMs: configFields.positiveInt(15_000),
    })
    .prefault({}),
  /**
   * The edge's signed identity: keys to verify it with, and what to do with a request without a
   * valid one (anonymous: tenant "unverified" at the lowest priority; refuse: 401).
   */
  identity: identityConfigSchema,
  /** Run representative requests before turning ready. */
  warmup: configFields.boolean(true),
  /** While the model loads, a `model load progress` log line this often (ms); 0: none. */
  loadProgressMs: z.coerce.number().int().min(0).default(5_000),
  /**
   * Event loops serving HTTP, all on the one port and the one engine: the main thread and
   * httpWorkers - 1 worker threads, each writing the streams of the connections the kernel gives
   * it (SO_REUSEPORT, Linux). 1: the main thread alone.
   */
  httpWorkers: z.coerce.number().int().min(1).max(64).default(1),
});
export type Config = z.output<typeof configSchema>;

export const configEnv: EnvMap = {
  ...baseServiceEnv,
  ...identityEnv,
  modelDir: 'STRATA_MODEL_DIR',
  servedModelName: 'STRATA_SERVED_MODEL_NAME',
  chatTemplate: 'STRATA_CHAT_TEMPLATE',
  'engine.backend': 'STRATA_ENGINE_BACKEND',
  'engine.threads': 'STRATA_ENGINE_THREADS',
  'engine.numBlocks': 'STRATA_KV_CACHE_BLOCKS',
  'engine.kvCacheBytes': 'STRATA_KV_CACHE_BYTES',
  'engine.kvMemoryFraction': 'STRATA_KV_MEMORY_FRACTION',
  'engine.dtype': 'STRATA_DTYPE',
  'engine.kvCacheDtype': 'STRATA_KV_CACHE_DTYPE',
  'engine.cpuWeightsDtype': 'STRATA_CPU_WEIGHTS_DTYPE',
  'engine.cpuKernels': 'STRATA_CPU_KERNELS',
  'engine.gpuMemoryUtilization': 'STRATA_GPU_MEMORY_UTILIZATION',
  'engine.cudaGraphs': 'STRATA_CUDA_GRAPHS',
  'engine.gpuSampling': 'STRATA_GPU_SAMPLING',
  'engine.blockSize': 'STRATA_BLOCK_SIZE',
  'engine.maxNumBatchedTokens': 'STRATA_MAX_NUM_BATCHED_TOKENS',
  'engine.maxNumSeqs': 'STRATA_MAX_NUM_SEQS',
  'engine.maxModelLen': 'STRATA_MAX_MODEL_LEN',
  'limits.maxQueued': 'STRATA_MAX_QUEUED',
  'limits.requestTimeoutMs': 'STRATA_REQUEST_TIMEOUT_MS',
  'limits.defaultMaxTokens': 'STRATA_DEFAULT_MAX_TOKENS',
  'limits.sseHeartbeatMs': 'STRATA_SSE_HEARTBEAT_MS',
  warmup: 'STRATA_WARMUP',
  loadProgressMs: 'STRATA_LOAD_PROGRESS_MS',
  httpWorkers: 'STRATA_HTTP_WORKERS',
};
/** Environment variable naming an optional YAML config file. */
export const CONFIG_FILE_ENV = 'STRATA_BACKEND_CONFIG';
