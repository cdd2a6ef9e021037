// What a run left behind on the harness: each backend's /load once the traffic is gone (a leaked
// KV block or a stuck sequence never gets back to idle) and every process's resident memory, so
// a long run (the soak) shows leaks as numbers. The fault tests assert on the same reports.
import { readFileSync } from 'node:fs';
import type { Harness } from './harness.js';
import { waitUntil } from './ports.js';

export interface LoadReport {
  running: number;
  waiting: number;
  kv_blocks_free: number;
  kv_blocks_total: number;
}

export async function loadOf(backendUrl: string): Promise<LoadReport> {
  return (await (await fetch(`${backendUrl}/load`)).json()) as LoadReport;
}

export const isIdle = (r: LoadReport | undefined): boolean =>
  r !== undefined &&
  r.running === 0 &&
  r.waiting === 0 &&
  r.kv_blocks_total > 0 &&
  r.kv_blocks_free === r.kv_blocks_total;

/**
 * Waits up to timeoutMs for every running backend to be idle with its whole KV pool free, and
 * returns each one's last report (idle or not: the caller decides what a leak means to it).
 */
export async function settledLoads(
  harness: Harness,
  timeoutMs = 30_000,
): Promise<{ backend: string; load: LoadReport | undefined }[]> {
  const out: { backend: string; load: LoadReport | undefined }[] = [];
  for (const backend of harness.backends.filter((b) => b.running)) {
    let last: LoadReport | undefined;
    await waitUntil(
      `${backend.label} to return every KV block`,
      async () => {
        last = await loadOf(backend.url);
        return isIdle(last);
      },
      timeoutMs,
      200,
    ).catch(() => undefined);
    out.push({ backend: backend.label, load: last });
  }
  return out;
}

/** Resident memory of a process in MiB (Linux /proc), or undefined when it cannot be read. */
export function rssMiB(pid: number): number | undefined {
  try {
    const kib = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kib === undefined ? undefined : Math.round((Number(kib) / 1024) * 10) / 10;
  } catch {
    return undefined;
  }
}

/** Resident memory of every service process the harness runs, by label. */
export function processMemory(harness: Harness): Record<string, number | undefined> {
  const services = [...harness.backends, ...harness.sidecars, harness.router, harness.edge];
  return Object.fromEntries(services.filter((s) => s.running).map((s) => [s.label, rssMiB(s.pid)]));
}

/** One reading of every service's resident memory, t_s seconds into a run. */
export interface MemorySample {
  t_s: number;
  rss_mib: Record<string, number | undefined>;
}

/**
 * Growth of each service's resident memory over the second half of a run (MiB): the first half
 * holds the warm-up (JIT, pools, caches), so steady growth after it is what a leak looks like.
 * Undefined for a service without readings at both ends, or with fewer than 3 samples.
 */
export function secondHalfGrowth(series: readonly MemorySample[]): Record<string, number | undefined> {
  if (series.length < 3) return {};
  const middle = series[Math.floor((series.length - 1) / 2)];
  const last = series[series.length - 1];
  if (middle === undefined || last === undefined) return {};
  return Object.fromEntries(
    Object.keys(last.rss_mib).map((label) => {
      const from = middle.rss_mib[label];
      const to = last.rss_mib[label];
      return [label, from === undefined || to === undefined ? undefined : Math.round((to - from) * 10) / 10];
    }),
  );
}
