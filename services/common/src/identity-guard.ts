// The router's and backends' side of the signed identity (identity.ts): every request on the
// routes of a scope is verified before its body is read. A valid identity gives the request its
// tenant and priority; anything else is served as tenant "unverified" at the lowest priority, or
// refused with 401 (the mode), counted by result and logged at most once per interval per reason.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { StrataError } from './errors.js';
import { HEADERS } from './headers.js';
import {
  type IdentityFailure,
  type IdentityKey,
  type IdentityMode,
  LOWEST_PRIORITY,
  UNVERIFIED_TENANT,
  UNVERIFIED_TIER,
  verifyIdentity,
} from './identity.js';
import { Counter, type Registry } from './metrics.js';

/** verified, why verification failed, or no_keys (none configured: nothing can be verified). */
export type IdentityResult = 'verified' | IdentityFailure | 'no_keys';

/** Who a request is, as this service may trust it. */
export interface RequestIdentity {
  tenant: string;
  tier: string;
  priority: number;
  result: IdentityResult;
}

export interface IdentityGuardOptions {
  keys: readonly IdentityKey[];
  mode: IdentityMode;
  registry: Registry;
  /** The counter's name, e.g. strata_router_identity_total. */
  metricName: string;
  /** At most one log line per failure reason per this many ms. Default 10,000. */
  logIntervalMs?: number;
  /**
   * Log at start-up what is verified, or warn that nothing is (default true). Off for the
   * inference backend's HTTP worker threads: the main thread says it once for the process.
   */
  announce?: boolean;
  now?: () => number;
}

const identities = new WeakMap<FastifyRequest, RequestIdentity>();

/** The identity the guard gave this request; throws if no guard ran (a wiring mistake). */
export function requestIdentity(request: FastifyRequest): RequestIdentity {
  const identity = identities.get(request);
  if (identity === undefined) throw new Error('no identity guard ran for this request');
  return identity;
}

const FAILURE_TEXT: Record<IdentityFailure, string> = {
  missing: 'it carries no x-strata-identity header',
  malformed: 'its x-strata-identity header is malformed',
  unknown_key: 'its x-strata-identity header names a key this service does not hold',
  bad_signature: 'the signature of its x-strata-identity header does not match',
  expired: 'its x-strata-identity header has expired',
  request_id_mismatch: 'its x-strata-identity header was signed for another request id',
};

function anonymous(result: IdentityResult): RequestIdentity {
  return { tenant: UNVERIFIED_TENANT, tier: UNVERIFIED_TIER, priority: LOWEST_PRIORITY, result };
}

/** Verifies every request of `scope` in an onRequest hook (before the body is read). */
export function registerIdentityGuard(scope: FastifyInstance, options: IdentityGuardOptions): void {
  const now = options.now ?? Date.now;
  const interval = options.logIntervalMs ?? 10_000;
  const counter = new Counter({
    name: options.metricName,
    help: 'Requests by identity check result: verified, no_keys (none configured), or why the signature failed (missing, malformed, unknown_key, bad_signature, expired, request_id_mismatch).',
    labelNames: ['result'],
    registers: [options.registry],
  });
  const lastLog = new Map<IdentityFailure, { at: number; suppressed: number }>();
  const { keys, mode } = options;
  if (options.announce !== false) {
    if (keys.length === 0) {
      scope.log.warn(
        `no identity keys (STRATA_IDENTITY_KEYS): nothing is verified, every request is tenant "${UNVERIFIED_TENANT}" at priority ${LOWEST_PRIORITY}`,
      );
    } else {
      scope.log.info({ key_ids: keys.map((k) => k.id), mode }, 'request identities verified');
    }
  }

  const logFailure = (request: FastifyRequest, reason: IdentityFailure) => {
    const t = now();
    const last = lastLog.get(reason);
    if (last && t - last.at < interval) {
      last.suppressed++;
      return;
    }
    const claimed = request.headers[HEADERS.tenant];
    request.log.warn(
      {
        identity: reason,
        mode,
        remote_address: request.ip,
        ...(typeof claimed === 'string' ? { claimed_tenant: claimed.slice(0, 64) } : {}),
        ...(last ? { suppressed: last.suppressed } : {}),
      },
      mode === 'refuse'
        ? 'request refused: no valid identity'
        : `no valid identity: served as tenant "${UNVERIFIED_TENANT}" at priority ${LOWEST_PRIORITY}`,
    );
    lastLog.set(reason, { at: t, suppressed: 0 });
  };

  scope.addHook('onRequest', async (request) => {
    if (keys.length === 0) {
      counter.inc({ result: 'no_keys' });
      identities.set(request, anonymous('no_keys'));
      return;
    }
    const header = request.headers[HEADERS.identity];
    const checked = verifyIdentity(
      typeof header === 'string' ? header : undefined,
      keys,
      now(),
      // The service base took the id from x-request-id when valid: the edge signed that one.
      request.id,
    );
    if (checked.ok) {
      counter.inc({ result: 'verified' });
      const { tenant, tier, priority } = checked.identity;
      identities.set(request, { tenant, tier, priority, result: 'verified' });
      return;
    }
    counter.inc({ result: checked.reason });
    logFailure(request, checked.reason);
    if (mode === 'refuse') {
      throw new StrataError(
        'STRATA_IDENTITY_INVALID',
        `Refused: ${FAILURE_TEXT[checked.reason]}. Requests reach this service through the edge.`,
      );
    }
    identities.set(request, anonymous(checked.reason));
  });
}
