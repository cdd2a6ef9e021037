#!/usr/bin/env node
// strata-warmup: sends representative streaming /v1/generate traffic to a backend (or through
// the edge) and exits 0 only when client-side TTFT has settled under a bound. The Helm warmup
// Job runs it after install/upgrade (docs/architecture.md, Delivery).
//
//   strata-warmup --url http://host:port [--model NAME] [--requests N] [--concurrency C]
//                 [--ttft-bound-ms B] [--timeout-s T] [--api-key KEY] [--max-tokens M]
//
// What it does:
//   1. Polls GET {url}/health/ready until 200 (bounded by --timeout-s).
//   2. Runs rounds at rising concurrency 1, 2, 4, ... up to C (C always included), then one more
//      "settle" round at C. Each round sends N streaming requests, at most that round's concurrency
//      in flight at once, cycling through short, medium and long prompts (greedy, max_tokens M).
//      TTFT is measured per request at the client: request sent -> first token event received.
//   3. Prints a progress line per round and a summary table (p50/p90/p99 TTFT per round).
//
// The settle rule (exit 0): the last round (the repeated top-concurrency round, measured after
// the first round at that concurrency has warmed that batch size) completed every request with
// a `done` event, and its p90 TTFT (nearest rank) is strictly under --ttft-bound-ms; and no
// request in any round failed other than with 429 or 503 (capacity and readiness answers,
// tolerated while earlier rounds ramp up but still reported). Otherwise exit 1; the whole run
// also fails (exit 1) when --timeout-s passes first. Bad usage exits 2.
// Only the /v1/generate body (docs/architecture.md, Wire contracts) is sent, with
// `Authorization: Bearer KEY` when --api-key (or STRATA_API_KEY) is given, so it works the same
// against the edge.
import { parseArgs } from 'node:util';
import { isMainModule } from './is-main.js';

const USAGE = `usage: strata-warmup --url http://host:port [--model NAME] [--requests N] [--concurrency C]
                     [--ttft-bound-ms B] [--timeout-s T] [--api-key KEY] [--max-tokens M]
  --requests N       requests per round (default 12)
  --concurrency C    highest concurrency; rounds run at 1, 2, 4, ..., C, then C again (default 8)
  --ttft-bound-ms B  the last round's p90 TTFT must be under B ms (default 1000)
  --timeout-s T      the whole run, readiness wait included (default 300)
  --api-key KEY      sent as Authorization: Bearer KEY (default: $STRATA_API_KEY)
  --max-tokens M     tokens per request (default 16)
exit: 0 TTFT settled, 1 not settled / failed requests / timeout, 2 bad usage`;

export interface WarmupOptions {
  url: URL;
  model: string | undefined;
  requests: number;
  concurrency: number;
  ttftBoundMs: number;
  timeoutS: number;
  apiKey: string | undefined;
  maxTokens: number;
}

export interface Io {
  out(line: string): void;
  err(line: string): void;
}

class UsageError extends Error {}

function numberOption(raw: string | undefined, name: string, fallback: number, integer: boolean): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(n) || n <= 0 || (integer && !Number.isInteger(n))) {
    throw new UsageError(`--${name} must be a positive ${integer ? 'integer' : 'number'}, got "${raw}"`);
  }
  return n;
}

export function parseOptions(argv: readonly string[], env: NodeJS.ProcessEnv = {}): WarmupOptions {
  const { values, positionals } = parseArgs({
    args: [...argv],
    strict: true,
    allowPositionals: true,
    options: {
      url: { type: 'string' },
      model: { type: 'string' },
      requests: { type: 'string' },
      concurrency: { type: 'string' },
      'ttft-bound-ms': { type: 'string' },
      'timeout-s': { type: 'string' },
      'api-key': { type: 'string' },
      'max-tokens': { type: 'string' },
      help: { type: 'boolean' },
    },
  });
  if (values.help) throw new UsageError('help');
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  if (values.url === undefined) throw new UsageError('--url is required');
  let url: URL;
  try {
    url = new URL(values.url);
  } catch {
    throw new UsageError(`--url must be an http(s) URL, got "${values.url}"`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new UsageError(`--url must be an http(s) URL, got "${values.url}"`);
  }
  if (values.model === '') throw new UsageError('--model must not be empty');
  const apiKey = values['api-key'] ?? env.STRATA_API_KEY;
  return {
    url,
    model: values.model,
    requests: numberOption(values.requests, 'requests', 12, true),
    concurrency: numberOption(values.concurrency, 'concurrency', 8, true),
    ttftBoundMs: numberOption(values['ttft-bound-ms'], 'ttft-bound-ms', 1000, false),
    timeoutS: numberOption(values['timeout-s'], 'timeout-s', 300, false),
    apiKey: apiKey === '' ? undefined : apiKey,
    maxTokens: numberOption(values['max-tokens'], 'max-tokens', 16, true),
  };
}

/** Concurrency per round: 1, 2, 4, ... below C, then C, then C again (the settle round). */
export function roundConcurrencies(max: number): number[] {
  const levels: number[] = [];
  for (let c = 1; c < max; c *= 2) levels.push(c);
  levels.push(max, max);
  return levels;
}

/** Nearest-rank percentile of ascending values; NaN when empty. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[Math.min(sorted.length, rank) - 1] ?? Number.NaN;
}

const WORDS =
  'once upon a time there was a little girl named lily she loved to play outside in the sun with her dog max one day they found a big red ball in the park'.split(
    ' ',
  );
/** Short, medium and long prompts (about 8, 48 and 200 words; all well inside small contexts). */
const PROMPT_WORDS = [8, 48, 200];
const prompt = (words: number, salt: number) =>
  Array.from({ length: words }, (_, i) => WORDS[(i + salt) % WORDS.length] ?? 'the').join(' ');

interface Outcome {
  ok: boolean;
  ttftMs: number | undefined;
  status: number | undefined;
  detail: string;
}

/** One streaming request: TTFT at the first token event; ok only when a done event arrives. */
async function streamOnce(options: WarmupOptions, body: unknown, signal: AbortSignal): Promise<Outcome> {
  const started = performance.now();
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'text/event-stream' };
  if (options.apiKey !== undefined) headers.authorization = `Bearer ${options.apiKey}`;
  let ttftMs: number | undefined;
  let status: number | undefined;
  try {
    const res = await fetch(new URL('/v1/generate', options.url), {
      method: 'POST',
      headers,
      body: JSON.stringify(body),
      signal,
    });
    status = res.status;
    if (res.status !== 200 || res.body === null) {
      const text = (await res.text()).slice(0, 300).replace(/\s+/g, ' ');
      const retry = res.headers.get('retry-after');
      return {
        ok: false,
        ttftMs,
        status,
        detail: `HTTP ${res.status}${retry ? ` (retry-after ${retry})` : ''}: ${text}`,
      };
    }
    const decoder = new TextDecoder();
    let buffer = '';
    for await (const chunk of res.body) {
      buffer += decoder.decode(chunk as Uint8Array, { stream: true });
      let end = buffer.indexOf('\n\n');
      while (end >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        end = buffer.indexOf('\n\n');
        const data = frame
          .split('\n')
          .filter((line) => line.startsWith('data: '))
          .map((line) => line.slice(6))
          .join('\n');
        if (data === '') continue; // heartbeat comment
        const event = JSON.parse(data) as { type?: string; error?: { code?: string; message?: string } };
        if (event.type === 'token' && ttftMs === undefined) ttftMs = performance.now() - started;
        if (event.type === 'done') {
          ttftMs ??= performance.now() - started;
          return { ok: true, ttftMs, status, detail: 'done' };
        }
        if (event.type === 'error') {
          return {
            ok: false,
            ttftMs,
            status,
            detail: `stream error ${event.error?.code}: ${event.error?.message}`,
          };
        }
      }
    }
    return { ok: false, ttftMs, status, detail: 'stream ended without a done event' };
  } catch (err) {
    return { ok: false, ttftMs, status, detail: `request failed: ${(err as Error).message}` };
  }
}

async function waitReady(options: WarmupOptions, deadline: number, io: Io): Promise<boolean> {
  const url = new URL('/health/ready', options.url);
  let last = '';
  for (let attempt = 0; Date.now() < deadline; attempt++) {
    try {
      const res = await fetch(url, {
        signal: AbortSignal.timeout(Math.max(1, Math.min(5_000, deadline - Date.now()))),
      });
      await res.body?.cancel();
      if (res.status === 200) {
        io.out(`ready: ${url.href}`);
        return true;
      }
      last = `HTTP ${res.status}`;
    } catch (err) {
      last = (err as Error).message;
    }
    if (attempt % 10 === 0) io.out(`waiting for ${url.href} (${last})`);
    await new Promise((r) => setTimeout(r, Math.max(0, Math.min(500, deadline - Date.now()))));
  }
  io.err(`not ready before the timeout: ${url.href} (${last})`);
  return false;
}

const ms = (n: number) => (Number.isNaN(n) ? '-' : n.toFixed(1));

/** Runs the warmup; returns the exit code. */
export async function runWarmup(options: WarmupOptions, io: Io): Promise<number> {
  const deadline = Date.now() + options.timeoutS * 1e3;
  if (!(await waitReady(options, deadline, io))) return 1;
  const signal = AbortSignal.timeout(Math.max(1, deadline - Date.now()));
  const levels = roundConcurrencies(options.concurrency);
  const rows: {
    round: number;
    concurrency: number;
    ok: number;
    failed: number;
    p50: number;
    p90: number;
    p99: number;
  }[] = [];
  let hardFailures = 0;
  let lastRoundFailures = 0;
  let salt = 0;
  for (const [r, concurrency] of levels.entries()) {
    const outcomes: Outcome[] = [];
    let next = 0;
    const worker = async () => {
      while (next < options.requests && !signal.aborted) {
        const i = next++;
        salt++;
        const body = {
          ...(options.model !== undefined ? { model: options.model } : {}),
          prompt: prompt(PROMPT_WORDS[i % PROMPT_WORDS.length] ?? 8, salt),
          max_tokens: options.maxTokens,
          temperature: 0,
          stream: true,
        };
        const outcome = await streamOnce(options, body, signal);
        outcomes.push(outcome);
        if (!outcome.ok) {
          io.err(`round ${r + 1} request ${i + 1}: FAILED ${outcome.detail}`);
          if (outcome.status !== 429 && outcome.status !== 503) hardFailures++;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, options.requests) }, worker));
    const ttfts = outcomes
      .filter((o) => o.ok && o.ttftMs !== undefined)
      .map((o) => o.ttftMs ?? 0)
      .sort((a, b) => a - b);
    const failed = options.requests - ttfts.length;
    const row = {
      round: r + 1,
      concurrency,
      ok: ttfts.length,
      failed,
      p50: percentile(ttfts, 50),
      p90: percentile(ttfts, 90),
      p99: percentile(ttfts, 99),
    };
    rows.push(row);
    lastRoundFailures = failed;
    io.out(
      `round ${row.round}/${levels.length}: concurrency ${concurrency}, ${row.ok} ok, ${failed} failed, ` +
        `TTFT p50 ${ms(row.p50)} ms p90 ${ms(row.p90)} ms p99 ${ms(row.p99)} ms`,
    );
    if (signal.aborted) {
      io.err(`timeout: --timeout-s ${options.timeoutS} passed during round ${r + 1}`);
      break;
    }
  }

  io.out('');
  io.out('round  concurrency  ok  failed  ttft_p50_ms  ttft_p90_ms  ttft_p99_ms');
  for (const row of rows) {
    io.out(
      `${String(row.round).padStart(5)}  ${String(row.concurrency).padStart(11)}  ${String(row.ok).padStart(2)}  ` +
        `${String(row.failed).padStart(6)}  ${ms(row.p50).padStart(11)}  ${ms(row.p90).padStart(11)}  ${ms(row.p99).padStart(11)}`,
    );
  }
  const last = rows.at(-1);
  const complete = rows.length === levels.length && !signal.aborted;
  const settled =
    complete &&
    last !== undefined &&
    lastRoundFailures === 0 &&
    hardFailures === 0 &&
    last.p90 < options.ttftBoundMs;
  const reason = !complete
    ? 'timed out'
    : hardFailures > 0
      ? `${hardFailures} request(s) failed with errors other than 429/503`
      : lastRoundFailures > 0
        ? `${lastRoundFailures} request(s) failed in the last round`
        : `last round p90 TTFT ${ms(last?.p90 ?? Number.NaN)} ms ${settled ? '<' : '>='} bound ${options.ttftBoundMs} ms`;
  (settled ? io.out : io.err)(`${settled ? 'settled' : 'NOT settled'}: ${reason}`);
  return settled ? 0 : 1;
}

export async function main(argv: readonly string[], io: Io, env: NodeJS.ProcessEnv = {}): Promise<number> {
  let options: WarmupOptions;
  try {
    options = parseOptions(argv, env);
  } catch (err) {
    if (err instanceof UsageError || (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      if ((err as Error).message === 'help') {
        io.out(USAGE);
        return 0;
      }
      io.err(`strata-warmup: ${(err as Error).message}\n${USAGE}`);
      return 2;
    }
    throw err;
  }
  return runWarmup(options, io);
}

if (isMainModule(import.meta.url)) {
  process.exitCode = await main(
    process.argv.slice(2),
    {
      out: (line) => void process.stdout.write(`${line}\n`),
      err: (line) => void process.stderr.write(`${line}\n`),
    },
    process.env,
  );
}
