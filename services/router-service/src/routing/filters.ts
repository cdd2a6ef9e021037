// The first picking stage: which backends may get the request at all. A backend that is not
// ready or has been ejected is never a candidate. Stale or missing load does NOT exclude a
// backend: load polling can lag or fail while the backend serves fine, and excluding on stale
// load would turn a slow poller into an outage. Such a backend stays eligible with
// load = undefined, the load scorers give it a neutral 0.5, and the saturation guard cannot
// call it saturated.
import { type BackendLoad, type BackendState, freshLoad } from './backend-state.js';

export interface EligibleBackend {
  backend: BackendState;
  /** Fresh load, or undefined when unknown or stale. */
  load: BackendLoad | undefined;
}

export interface ExcludedBackend {
  name: string;
  why: 'not ready' | 'ejected';
}

export interface FilterResult {
  eligible: EligibleBackend[];
  excluded: ExcludedBackend[];
}

export function filterBackends(
  backends: readonly BackendState[],
  now: number,
  /** Load older than this at `now` counts as unknown. */
  loadMaxAgeMs: number,
): FilterResult {
  const eligible: EligibleBackend[] = [];
  const excluded: ExcludedBackend[] = [];
  for (const backend of backends) {
    if (!backend.ready) excluded.push({ name: backend.name, why: 'not ready' });
    else if (!backend.healthy) excluded.push({ name: backend.name, why: 'ejected' });
    else eligible.push({ backend, load: freshLoad(backend.load, now, loadMaxAgeMs) });
  }
  return { eligible, excluded };
}
