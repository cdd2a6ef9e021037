import {
  type BackendLoad,
  type BackendState,
  DEFAULT_LOAD_MAX_AGE_MS,
} from '../../src/routing/backend-state.js';
import { type EligibleBackend, filterBackends } from '../../src/routing/filters.js';
import { type PickOptions, type PickResult, pick, profileOf } from '../../src/routing/picker.js';
import { type Policy, parseRoutingConfig } from '../../src/routing/rules.js';

export const NOW = 1_000_000;

export function backend(
  name: string,
  load?: Partial<BackendLoad>,
  extra: Partial<BackendState> = {},
): BackendState {
  return {
    name,
    url: `http://${name}.test:8000`,
    ready: true,
    healthy: true,
    ...(load && { load: { waiting: 0, running: 0, kvUsage: 0, freeBlocks: 100, at: NOW, ...load } }),
    ...extra,
  };
}

/** Eligible view with the backend's load taken as fresh. */
export function eligible(...backends: BackendState[]): EligibleBackend[] {
  return backends.map((b) => ({ backend: b, load: b.load }));
}

export function policy(
  overrides: { weights?: Partial<Policy['weights']>; saturation?: Partial<Policy['saturation']> } = {},
): Policy {
  const config = parseRoutingConfig(
    {
      pools: { p: {} },
      default: { pool: 'p', policy: { weights: overrides.weights, saturation: overrides.saturation } },
    },
    'test',
  );
  const rule = config.rules[0];
  if (rule === undefined) throw new Error('no default rule');
  return rule.policy;
}

/** Filters, then picks with the policy's profile, as the router does; load fresh for the default limit. */
export function pickAmong(
  backends: readonly BackendState[],
  rule: Policy,
  {
    now,
    loadMaxAgeMs = DEFAULT_LOAD_MAX_AGE_MS,
    ...options
  }: PickOptions & { now: number; loadMaxAgeMs?: number },
): PickResult {
  return pick(filterBackends(backends, now, loadMaxAgeMs), profileOf(rule), options);
}
