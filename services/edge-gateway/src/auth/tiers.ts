// Service tiers: each tenant's tier bounds the priority it may ask for and gives the one it gets
// when it asks for none (lower = more urgent, the engine's range -100..100). The edge clamps
// what a client asks, so no tenant can put itself ahead of a better tier. The default table
// keeps the ranges apart: every premium priority is more urgent than every standard one, and
// every standard one more urgent than every free one.
import { HIGHEST_PRIORITY, LOWEST_PRIORITY } from '@strata/common';

export interface Tier {
  name: string;
  /** Most urgent priority a tenant of this tier may ask for. */
  min: number;
  /** Least urgent. */
  max: number;
  /** Given when the request asks for none. */
  default: number;
}

export const DEFAULT_TIERS = Object.freeze({
  premium: { name: 'premium', min: HIGHEST_PRIORITY, max: -1, default: -50 },
  standard: { name: 'standard', min: 0, max: 49, default: 0 },
  free: { name: 'free', min: 50, max: LOWEST_PRIORITY, default: 75 },
} satisfies Record<string, Tier>);

/** The tier of tenants that name none, and of every request when auth is off. */
export const DEFAULT_TIER_NAME: keyof typeof DEFAULT_TIERS = 'standard';

/** The priority a request gets: what it asked for, clamped to its tier, or the tier's default. */
export function grantPriority(tier: Tier, asked: number | undefined): number {
  if (asked === undefined) return tier.default;
  return Math.min(tier.max, Math.max(tier.min, asked));
}

/** The x-strata-priority header as asked: an integer, else undefined (ignored, as before). */
export function priorityHeader(value: string | string[] | undefined): number | undefined {
  const text = Array.isArray(value) ? value[0] : value;
  if (text === undefined || !/^\s*[-+]?\d{1,4}\s*$/.test(text)) return undefined;
  return Number(text);
}
