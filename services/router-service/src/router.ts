// One request's way through the router: rule -> pool -> eligible backends -> session affinity ->
// pick (scorers, guard) -> forward through the ordered candidates -> one decision log line.
// Each step lives in router/ or routing/; this file only puts them in order. Never validates
// bodies (the edge does) and never touches GPUs.
import type { IdentityConfig, ServiceMetrics } from '@strata/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AffinityService } from './affinity/index.js';
import type { BackendTracker } from './health/index.js';
import type { RetryBudget } from './proxy/forward.js';
import { tryCandidates } from './router/attempts.js';
import { requestContext } from './router/context.js';
import { createRouterMetrics, recordDecision } from './router/decision.js';
import { lookupAffinity, poolBackends } from './router/pool.js';
import {
  filterBackends,
  matchRule,
  PrefixIndex,
  pick,
  profileOf,
  type RoutingConfig,
} from './routing/index.js';

export interface RouterDeps {
  routing: () => RoutingConfig;
  tracker: BackendTracker;
  affinity: AffinityService;
  retry: RetryBudget;
  /** Load older than this (ms) counts as unknown. */
  loadMaxAgeMs: number;
  metrics: ServiceMetrics;
  /** Verifies the edge's signed identity on every inference request. */
  identity: IdentityConfig;
  /** A pool's discovered backends (Kubernetes), members besides its static ones. */
  discovered?: (pool: string) => readonly string[];
}

export type Route = (request: FastifyRequest, reply: FastifyReply, path: string) => Promise<FastifyReply>;

export function createRouter(deps: RouterDeps): Route {
  const prefixIndex = new PrefixIndex();
  const metrics = createRouterMetrics(deps.metrics.registry);
  let turn = 0; // rotates backends that tie for the best score

  return async function route(request, reply, path) {
    const context = requestContext(request);
    const routing = deps.routing();
    const rule = matchRule(routing.rules, context.match);
    const backends = poolBackends(deps.tracker, routing, rule.pool, deps.discovered);
    const filtered = filterBackends(backends, Date.now(), deps.loadMaxAgeMs);
    const affinity = await lookupAffinity(deps.affinity, context.session, filtered.eligible);
    const prefixHashes = prefixIndex.hashes(context.promptText);
    const picked = pick(filtered, profileOf(rule.policy), {
      tieBreaker: turn++,
      prefixHashes,
      prefixIndex,
      ...(affinity?.result === 'hit' ? { sessionBackend: affinity.backend } : {}),
    });
    const target = {
      path,
      route: rule.name,
      body: request.rawBody,
      candidates: picked.candidates.map((c) => c.backend),
      budget: deps.retry,
    };
    const outcome = await tryCandidates(request, reply, target, {
      failed: (backend) => deps.tracker.reportFailure(backend),
      answered: (backend, firstByteSeconds) => {
        deps.tracker.reportSuccess(backend);
        metrics.upstreamSeconds.observe({ backend }, firstByteSeconds);
        prefixIndex.record(prefixHashes, backend);
        if (context.session) void deps.affinity.remember(context.session, backend);
      },
    });
    recordDecision(
      request.log,
      metrics,
      { rule, session: context.session, affinity, picked, identity: context.identity },
      outcome,
    );
    if (outcome.error) throw outcome.error;
    return reply;
  };
}
