// What the router records of each request: one `route decision` log line (rule, pool, who the
// request is, session, every candidate's scores, exclusions, attempts) and its metrics.
import { Counter, Histogram, type Registry, type RequestIdentity } from '@strata/common';
import type { FastifyBaseLogger } from 'fastify';
import type { AffinityLookup } from '../affinity/index.js';
import type { PickResult, Rule } from '../routing/index.js';
import type { AttemptOutcome } from './attempts.js';

export interface RouterMetrics {
  decisions: Counter<'rule' | 'backend'>;
  retries: Counter<'backend' | 'outcome'>;
  upstreamSeconds: Histogram<'backend'>;
}

export function createRouterMetrics(registry: Registry): RouterMetrics {
  return {
    decisions: new Counter({
      name: 'strata_router_decisions_total',
      help: 'Requests routed, by rule and chosen backend (backend "none" when no candidate answered).',
      labelNames: ['rule', 'backend'],
      registers: [registry],
    }),
    retries: new Counter({
      name: 'strata_router_retries_total',
      help: 'Attempts beyond the first, by the failed backend and outcome.',
      labelNames: ['backend', 'outcome'],
      registers: [registry],
    }),
    upstreamSeconds: new Histogram({
      name: 'strata_router_upstream_first_byte_seconds',
      help: 'From forwarding to the first byte of the chosen backend, per attempt that answered.',
      labelNames: ['backend'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [registry],
    }),
  };
}

export interface Decision {
  rule: Rule;
  session: string | undefined;
  affinity: AffinityLookup | undefined;
  picked: PickResult;
  identity: RequestIdentity;
}

export function recordDecision(
  log: FastifyBaseLogger,
  metrics: RouterMetrics,
  { rule, session, affinity, picked, identity }: Decision,
  outcome: AttemptOutcome,
): void {
  // When a backend answered (or the client left), the last attempt is not a retry.
  const retried = outcome.error ? outcome.attempts : outcome.attempts.slice(0, -1);
  for (const a of retried) metrics.retries.inc({ backend: a.backend, outcome: a.outcome });
  log.info(
    {
      rule: rule.name,
      pool: rule.pool,
      tenant: identity.tenant,
      tier: identity.tier,
      priority: identity.priority,
      identity: identity.result,
      session: session ?? null,
      affinity: affinity?.result ?? null,
      candidates: picked.candidates.map((c) => ({
        backend: c.backend.name,
        score: Number(c.score.toFixed(4)),
        scores: c.scores,
        ...(c.saturated ? { saturated: c.saturated } : {}),
      })),
      excluded: picked.excluded,
      choice: outcome.backend ?? null,
      reason: picked.reason,
      attempts: outcome.attempts,
      failed_after_first_byte: outcome.failedAfterFirstByte,
      ...(outcome.error ? { error: outcome.error.message } : {}),
    },
    'route decision',
  );
  metrics.decisions.inc({ rule: rule.name, backend: outcome.backend ?? 'none' });
}
