#!/usr/bin/env node
// strata-fetch-model: puts a model's files into a cache directory once, from S3 or the Hugging
// Face Hub, before the backend starts (the chart's init container runs it from the backend's
// own image: nothing is installed at run time).
//
//   strata-fetch-model --source URI --dest DIR [--include GLOB]... [--concurrency N]
//                      [--stale-lock-s S] [--wait-timeout-s T] [--progress-interval-s P]
//                      [--max-mb-per-s M] [--require-checksum] [--s3-force-path-style]
//
// Sources: s3://bucket/prefix (AWS SDK default credentials: IRSA in a pod; AWS_REGION,
// AWS_ENDPOINT_URL_S3) and hf://org/repo[@revision] (HF_TOKEN, HF_ENDPOINT). The download-once
// lock, atomic renames, checksums and progress lines are model-fetch/cache.ts's.
// Exit: 0 the model is in DIR (fetched now, before, or by another pod), 1 it could not be
// fetched (the last log line says why), 2 bad usage.
import { parseArgs } from 'node:util';
import { createLogger, type Logger } from '@strata/common';
import { isMainModule } from './is-main.js';
import { fetchModel } from './model-fetch/cache.js';
import { hfSource } from './model-fetch/hf.js';
import { s3Source } from './model-fetch/s3.js';
import { FetchError, type ModelSource, parseSourceUri } from './model-fetch/source.js';

/** What a model needs (huggingface_hub's allow patterns of the chart before, plus GGUF files). */
export const DEFAULT_INCLUDE = ['*.json', '*.safetensors', '*.gguf', '*.jinja', 'tokenizer.model'];

const USAGE = `usage: strata-fetch-model --source URI --dest DIR [options]
  --source URI            s3://bucket/prefix or hf://org/repo[@revision] (default: $STRATA_MODEL_SOURCE)
  --dest DIR              the model directory to fill (default: $STRATA_MODEL_DIR)
  --include GLOB          files to fetch, repeatable (default: ${DEFAULT_INCLUDE.join(' ')})
  --concurrency N         files downloaded at once (default 4)
  --stale-lock-s S        a lock untouched this long is a dead downloader's (default 60)
  --wait-timeout-s T      how long to wait for another downloader (default 7200)
  --progress-interval-s P seconds between progress lines (default 5)
  --max-mb-per-s M        cap the download rate (leave bandwidth to the node's serving pods)
  --require-checksum      fail when the source has no checksum for a file
  --s3-force-path-style   path-style S3 requests (S3-compatible servers; also STRATA_S3_FORCE_PATH_STYLE=true)
environment: AWS_REGION, AWS_ENDPOINT_URL_S3 and the AWS credential chain (IRSA); HF_TOKEN, HF_ENDPOINT
exit: 0 the model is in DIR, 1 fetch failed, 2 bad usage`;

export interface FetchCliOptions {
  source: string;
  dest: string;
  include: string[];
  concurrency: number;
  staleLockS: number;
  waitTimeoutS: number;
  progressIntervalS: number;
  maxMbPerS: number | undefined;
  requireChecksum: boolean;
  s3ForcePathStyle: boolean;
}

function positive(raw: string | undefined, name: string, fallback: number, integer = false): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(n) || n <= 0 || (integer && !Number.isInteger(n)))
    throw new FetchError(
      'STRATA_FETCH_USAGE',
      `--${name} must be a positive ${integer ? 'integer' : 'number'}, got "${raw}"`,
    );
  return n;
}

export function parseFetchOptions(argv: readonly string[], env: NodeJS.ProcessEnv = {}): FetchCliOptions {
  let parsed: ReturnType<typeof parseArgs<{ options: typeof OPTIONS; strict: true; allowPositionals: true }>>;
  try {
    parsed = parseArgs({ args: [...argv], strict: true, allowPositionals: true, options: OPTIONS });
  } catch (err) {
    throw new FetchError('STRATA_FETCH_USAGE', (err as Error).message);
  }
  const { values, positionals } = parsed;
  if (positionals.length > 0)
    throw new FetchError('STRATA_FETCH_USAGE', `unexpected argument "${positionals[0]}"`);
  const source = values.source ?? env.STRATA_MODEL_SOURCE;
  const dest = values.dest ?? env.STRATA_MODEL_DIR;
  if (!source) throw new FetchError('STRATA_FETCH_USAGE', '--source is required');
  if (!dest) throw new FetchError('STRATA_FETCH_USAGE', '--dest is required');
  parseSourceUri(source);
  return {
    source,
    dest,
    include: values.include && values.include.length > 0 ? values.include : DEFAULT_INCLUDE,
    concurrency: positive(values.concurrency, 'concurrency', 4, true),
    staleLockS: positive(values['stale-lock-s'], 'stale-lock-s', 60),
    waitTimeoutS: positive(values['wait-timeout-s'], 'wait-timeout-s', 7200),
    progressIntervalS: positive(values['progress-interval-s'], 'progress-interval-s', 5),
    maxMbPerS:
      values['max-mb-per-s'] === undefined ? undefined : positive(values['max-mb-per-s'], 'max-mb-per-s', 0),
    requireChecksum: values['require-checksum'] ?? false,
    s3ForcePathStyle: values['s3-force-path-style'] ?? env.STRATA_S3_FORCE_PATH_STYLE === 'true',
  };
}

const OPTIONS = {
  source: { type: 'string' },
  dest: { type: 'string' },
  include: { type: 'string', multiple: true },
  concurrency: { type: 'string' },
  'stale-lock-s': { type: 'string' },
  'wait-timeout-s': { type: 'string' },
  'progress-interval-s': { type: 'string' },
  'max-mb-per-s': { type: 'string' },
  'require-checksum': { type: 'boolean' },
  's3-force-path-style': { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

export function sourceFor(options: FetchCliOptions, env: NodeJS.ProcessEnv): ModelSource {
  const uri = parseSourceUri(options.source);
  if (uri.kind === 's3') return s3Source(uri, { forcePathStyle: options.s3ForcePathStyle });
  return hfSource(uri.repo, uri.revision, {
    ...(env.HF_ENDPOINT ? { endpoint: env.HF_ENDPOINT } : {}),
    ...(env.HF_TOKEN ? { token: env.HF_TOKEN } : {}),
  });
}

export async function main(argv: readonly string[], env: NodeJS.ProcessEnv, logger: Logger): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  let options: FetchCliOptions;
  try {
    options = parseFetchOptions(argv, env);
  } catch (err) {
    if (!(err instanceof FetchError)) throw err;
    logger.error({ code: err.code }, err.message);
    process.stderr.write(`strata-fetch-model: ${err.message}\n${USAGE}\n`);
    return 2;
  }
  try {
    await fetchModel({
      source: sourceFor(options, env),
      dest: options.dest,
      include: options.include,
      logger,
      concurrency: options.concurrency,
      staleLockMs: options.staleLockS * 1e3,
      waitTimeoutMs: options.waitTimeoutS * 1e3,
      progressIntervalMs: options.progressIntervalS * 1e3,
      requireChecksum: options.requireChecksum,
      ...(options.maxMbPerS ? { maxBytesPerSecond: options.maxMbPerS * 1e6 } : {}),
    });
    return 0;
  } catch (err) {
    const e = err as Error & { code?: string };
    logger.error(
      {
        code: err instanceof FetchError ? e.code : 'STRATA_FETCH_FAILED',
        source: options.source,
        dest: options.dest,
      },
      `model fetch failed: ${e.message}`,
    );
    return 1;
  }
}

if (isMainModule(import.meta.url)) {
  const logger = createLogger({ service: 'model-fetch', level: process.env.LOG_LEVEL ?? 'info' });
  process.exitCode = await main(process.argv.slice(2), process.env, logger);
}
