// One request's way through the router: rule -> pool -> live backends -> session affinity ->
// pick (filters, scorers, guard) -> forward through the ordered candidates -> one decision
// log line. Never validates bodies (the edge does) and never touches GPUs.
import { Counter, HEADERS, Histogram, propagationHeaders, type ServiceMetrics } from '@strata/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AffinityService } from './affinity/index.js';
import type { BackendTracker } from './health/index.js';
import { type Attempt, forward } from './proxy/forward.js';
import { matchRule, PrefixIndex, pick, type RoutingConfig } from './routing/index.js';

export interface RouterDeps {
  routing: () => RoutingConfig;
  tracker: BackendTracker;
  affinity: AffinityService;
  retry: { attempts: number; deadlineMs: number };
  metrics: ServiceMetrics;
  /** A pool's discovered backends (Kubernetes), members besides its static ones. */
  discovered?: (pool: string) => readonly string[];
}

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

interface Body {
  model?: unknown;
  prompt?: unknown;
  messages?: unknown;
  priority?: unknown;
}

// The text rules size by and prefix affinity hashes: the prompt, or the chat messages' contents.
function promptText(body: Body): string {
  if (typeof body.prompt === 'string') return body.prompt;
  if (Array.isArray(body.prompt)) return body.prompt.join(' ');
  if (Array.isArray(body.messages)) {
    return body.messages
      .map((m: { content?: unknown }) =>
        typeof m.content === 'string'
          ? m.content
          : Array.isArray(m.content)
            ? m.content.map((p: { text?: unknown }) => String(p.text ?? '')).join('\n')
            : '',
      )
      .join('\n');
  }
  return '';
}

function header(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  return typeof value === 'string' && value !== '' ? value : undefined;
}

export function createRouter(deps: RouterDeps) {
  const prefixIndex = new PrefixIndex();
  let turn = 0; // rotates backends that tie for the best score
  const decisions = new Counter({
    name: 'strata_router_decisions_total',
    help: 'Requests routed, by rule and chosen backend (backend "none" when no candidate answered).',
    labelNames: ['rule', 'backend'],
    registers: [deps.metrics.registry],
  });
  const retries = new Counter({
    name: 'strata_router_retries_total',
    help: 'Attempts beyond the first, by the failed backend and outcome.',
    labelNames: ['backend', 'outcome'],
    registers: [deps.metrics.registry],
  });
  const upstreamSeconds = new Histogram({
    name: 'strata_router_upstream_first_byte_seconds',
    help: 'From forwarding to the first byte of the chosen backend, per attempt that answered.',
    labelNames: ['backend'],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [deps.metrics.registry],
  });

  return async function route(
    request: FastifyRequest,
    reply: FastifyReply,
    path: string,
  ): Promise<FastifyReply> {
    const body = (
      request.method === 'POST' && request.body && typeof request.body === 'object' ? request.body : {}
    ) as Body;
    const text = promptText(body);
    const tenant = header(request, HEADERS.tenant);
    const priority =
      typeof body.priority === 'number'
        ? body.priority
        : Number(header(request, HEADERS.priority) ?? Number.NaN);
    const routing = deps.routing();
    const rule = matchRule(routing.rules, {
      ...(typeof body.model === 'string' ? { model: body.model } : {}),
      ...(tenant ? { tenant } : {}),
      headers: request.headers,
      ...(Number.isInteger(priority) ? { priority } : {}),
      promptChars: text.length,
    });
    const members = poolMembers(routing, rule.pool, deps.discovered);
    const backends = deps.tracker.snapshot().filter((b) => members.has(b.name));
    const session = header(request, HEADERS.sessionId);
    const live = backends.filter((b) => b.ready && b.healthy).map((b) => b.name);
    const affinity = session ? await deps.affinity.lookup(session, live) : undefined;
    const prefixHashes = prefixIndex.hashes(text);
    const picked = pick(backends, rule.policy, {
      now: Date.now(),
      tieBreaker: turn++,
      prefixHashes,
      prefixIndex,
      ...(affinity?.result === 'hit' ? { sessionBackend: affinity.backend } : {}),
    });

    const controller = new AbortController();
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) controller.abort();
    });
    const headers: Record<string, string> = {
      ...propagationHeaders(request.headers),
      [HEADERS.requestId]: request.id,
    };
    if (request.method === 'POST') headers['content-type'] = 'application/json';
    const started = Date.now();
    let chosen: string | undefined;
    try {
      const result = await forward(
        {
          method: request.method === 'POST' ? 'POST' : 'GET',
          path,
          headers,
          ...(request.method === 'POST' ? { body: JSON.stringify(request.body) } : {}),
          signal: controller.signal,
          route: rule.name,
        },
        picked.candidates.map((c) => ({ name: c.backend.name, url: c.backend.url })),
        deps.retry,
        reply,
        (backend) => deps.tracker.reportFailure(backend),
        (backend) => {
          chosen = backend;
          deps.tracker.reportSuccess(backend);
          upstreamSeconds.observe({ backend }, (Date.now() - started) / 1e3);
          prefixIndex.record(prefixHashes, backend);
          if (session) void deps.affinity.remember(session, backend);
        },
      );
      for (const a of result.attempts.slice(0, -1)) retries.inc({ backend: a.backend, outcome: a.outcome });
      logDecision(result.backend, result.attempts, result.failedAfterFirstByte);
      return reply;
    } catch (err) {
      const attempts = (err as { details?: { attempts?: Attempt[] } }).details?.attempts ?? [];
      for (const a of attempts) retries.inc({ backend: a.backend, outcome: a.outcome });
      logDecision(undefined, attempts, false, (err as Error).message);
      throw err;
    } finally {
      decisions.inc({ rule: rule.name, backend: chosen ?? 'none' });
    }

    function logDecision(
      choice: string | undefined,
      attempts: Attempt[],
      failedAfterFirstByte: boolean,
      error?: string,
    ) {
      request.log.info(
        {
          rule: rule.name,
          pool: rule.pool,
          session: session ?? null,
          affinity: affinity?.result ?? null,
          candidates: picked.candidates.map((c) => ({
            backend: c.backend.name,
            score: Number(c.score.toFixed(4)),
            scores: c.scores,
            ...(c.saturated ? { saturated: c.saturated } : {}),
          })),
          excluded: picked.excluded,
          choice: choice ?? null,
          reason: picked.reason,
          attempts,
          failed_after_first_byte: failedAfterFirstByte,
          ...(error ? { error } : {}),
        },
        'route decision',
      );
    }
  };
}
