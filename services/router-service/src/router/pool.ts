// The rule's pool as the tracker sees it now, and the session's backend among its eligible
// members: the inputs of the pick.
import type { AffinityLookup, AffinityService } from '../affinity/index.js';
import type { BackendTracker } from '../health/index.js';
import type { BackendState, EligibleBackend, RoutingConfig } from '../routing/index.js';

/** The backend names of a pool: its static backends and what discovery found. */
export function poolMembers(
  routing: RoutingConfig,
  pool: string,
  discovered?: (pool: string) => readonly string[],
): Set<string> {
  const members = new Set((routing.pools[pool]?.backends ?? []).map((b) => b.name));
  for (const name of discovered?.(pool) ?? []) members.add(name);
  return members;
}

/** The tracker's current state of each member of the pool. */
export function poolBackends(
  tracker: BackendTracker,
  routing: RoutingConfig,
  pool: string,
  discovered?: (pool: string) => readonly string[],
): BackendState[] {
  const members = poolMembers(routing, pool, discovered);
  return tracker.snapshot().filter((b) => members.has(b.name));
}

/** The session's remembered backend if it is still eligible; undefined without a session. */
export async function lookupAffinity(
  affinity: AffinityService,
  session: string | undefined,
  eligible: readonly EligibleBackend[],
): Promise<AffinityLookup | undefined> {
  if (session === undefined) return undefined;
  return affinity.lookup(
    session,
    eligible.map((e) => e.backend.name),
  );
}
