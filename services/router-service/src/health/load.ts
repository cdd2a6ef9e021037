// The backend's GET /load report, parsed with the shared contract (@strata/common
// loadReportSchema; extra fields are ignored), and the slice of it the picker reads.
import type { LoadReport } from '@strata/common';

export { type LoadReport, loadReportSchema } from '@strata/common';

/** What the picker reads: the last load report and when the router received it. */
export interface BackendLoad {
  waiting: number;
  running: number;
  /** Used KV blocks / total, 0..1. */
  kvUsage: number;
  /** KV blocks a new request can take. */
  freeBlocks: number;
  /** Receive time, epoch ms (the router's clock, not the backend's). */
  at: number;
}

export function toBackendLoad(report: LoadReport, at: number): BackendLoad {
  return {
    waiting: report.waiting,
    running: report.running,
    kvUsage: report.kv_usage,
    freeBlocks: report.kv_blocks_free,
    at,
  };
}

/** docs/architecture.md, Wire contracts: load older than ~250 ms counts as unknown. */
export const LOAD_MAX_AGE_MS = 250;

export function isLoadFresh(load: BackendLoad | undefined, now: number, maxAgeMs = LOAD_MAX_AGE_MS): boolean {
  return load !== undefined && now - load.at <= maxAgeMs;
}
