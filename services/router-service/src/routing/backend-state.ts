// The picker's view of one backend. Health and load are written by src/health/ and read here;
// load is only trusted while it is fresh (docs/architecture.md, Wire contracts: older than the
// limit, STRATA_LOAD_MAX_AGE_MS, counts as unknown).

/** From the backend's compact load endpoint. */
export interface BackendLoad {
  waiting: number;
  running: number;
  /** Fraction of KV cache blocks in use, 0..1. */
  kvUsage: number;
  freeBlocks: number;
  /** When it was read, ms since the epoch (Date.now()). */
  at: number;
}

export interface BackendState {
  name: string;
  url: string;
  /** /health/ready said yes (or the EndpointSlice marks the endpoint ready). */
  ready: boolean;
  /** Not ejected by passive health checks. */
  healthy: boolean;
  load?: BackendLoad;
}

/** The default freshness limit of a load report (config health.loadMaxAgeMs). */
export const DEFAULT_LOAD_MAX_AGE_MS = 250;

/** The load if it is at most maxAgeMs old at `now`, else undefined (unknown). */
export function freshLoad(
  load: BackendLoad | undefined,
  now: number,
  maxAgeMs: number,
): BackendLoad | undefined {
  return load !== undefined && now - load.at <= maxAgeMs ? load : undefined;
}
