// Runs a k6 suite from load-testing/k6 against a URL, with k6 from .toolchain (built from the
// Go module proxy by scripts/ensure-k6.sh on first use).
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const packageDir = join(dirname(fileURLToPath(import.meta.url)), '..');
export const SCENARIOS = ['smoke', 'steady', 'ramp', 'spike', 'soak'] as const;
export type Scenario = (typeof SCENARIOS)[number];

/** The k6 binary's path; builds it on first use (about 3 minutes here). */
export function ensureK6(): string {
  return execFileSync('bash', [join(packageDir, 'scripts', 'ensure-k6.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  }).trim();
}

export interface K6RunOptions {
  scenario: Scenario;
  target: string;
  apiKey?: string;
  /** Where handleSummary writes its JSON. */
  summaryJson: string;
  /** Per-request samples as CSV (k6 --out csv=...), for the plot. */
  csv?: string;
  /** STRATA_* knobs of the suites (rates, durations, thresholds). */
  env?: Record<string, string>;
  onLine?: (line: string) => void;
}

export interface K6Result {
  /** k6's exit code: 0 = every threshold held, 99 = a threshold failed. */
  code: number;
  summary: Record<string, unknown> | undefined;
}

export async function runK6(options: K6RunOptions): Promise<K6Result> {
  const k6 = ensureK6();
  const args = ['run', '--no-color', '--no-usage-report'];
  if (options.csv) args.push('--out', `csv=${options.csv}`);
  args.push(join(packageDir, 'k6', `${options.scenario}.js`));
  const child = spawn(k6, args, {
    env: {
      ...process.env,
      ...options.env,
      STRATA_TARGET_URL: options.target,
      STRATA_API_KEY: options.apiKey ?? '',
      STRATA_SUMMARY_JSON: options.summaryJson,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  for (const stream of [child.stdout, child.stderr]) {
    createInterface({ input: stream as NodeJS.ReadableStream }).on('line', (line) => options.onLine?.(line));
  }
  const code = await new Promise<number>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (c, signal) => resolve(c ?? (signal ? 128 : 1)));
  });
  const summary = existsSync(options.summaryJson)
    ? (JSON.parse(readFileSync(options.summaryJson, 'utf8')) as Record<string, unknown>)
    : undefined;
  return { code, summary };
}
