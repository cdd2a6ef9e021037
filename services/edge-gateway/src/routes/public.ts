// The public API as the edge sees it: every body validated with the shared zod schemas (the
// same ones the backend uses), then forwarded to the router unchanged in meaning. Auth runs
// before the body is read; quotas are taken after it validated, so a malformed request costs
// the tenant nothing.
import {
  type ChatCompletionRequest,
  type CompletionRequest,
  chatCompletionRequestSchema,
  chatCompletionResponseSchema,
  checkStreamOptions,
  completionRequestSchema,
  completionResponseSchema,
  dropNullFields,
  errorResponses,
  generateRequestSchema,
  generateResponseSchema,
  HEADERS,
  IDENTITY_TTL_MS,
  type IdentityKey,
  modelListSchema,
  propagationHeaders,
  signIdentity,
} from '@strata/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { Dispatcher } from 'undici';
import { authenticate } from '../auth/authenticate.js';
import type { Tenant, TenantKey } from '../auth/tenants.js';
import { grantPriority, priorityHeader } from '../auth/tiers.js';
import type { EdgeMetrics } from '../metrics.js';
import { forward, type StreamDialect } from '../proxy/forward.js';
import { jsonUsageTap, sseUsageTap } from '../proxy/usage-tap.js';
import { QuotaRefusal, type Quotas, type RateLimitHeaders } from '../quota/quotas.js';

declare module 'fastify' {
  interface FastifyRequest {
    tenant: Tenant;
    rateLimitHeaders: RateLimitHeaders;
  }
}

export interface PublicRoutesOptions {
  router: Dispatcher;
  /** The current tenant keys; undefined when auth is off. */
  keys: () => readonly TenantKey[] | undefined;
  quotas: Quotas;
  metrics: EdgeMetrics;
  /** Signs each forwarded request's identity; undefined: nothing is signed. */
  identityKey: IdentityKey | undefined;
}

const errors = errorResponses(400, 401, 404, 413, 415, 429, 502, 503, 504);
const security = [{ bearerAuth: [] }];
// JSON, or server-sent events when the body asks for a stream.
const produces = ['application/json', 'text/event-stream'];

export const publicRoutes: FastifyPluginAsyncZod<PublicRoutesOptions> = async (app, options) => {
  app.decorateRequest('tenant');
  app.decorateRequest('rateLimitHeaders');

  // A callback hook: a few microseconds less per request than an async one.
  app.addHook('onRequest', (request, reply, done) => {
    try {
      request.tenant = authenticate(request.headers.authorization, options.keys());
    } catch (err) {
      reply.header('www-authenticate', 'Bearer');
      done(err as Error);
      return;
    }
    done();
  });
  app.addHook('preHandler', async (request, reply) => {
    try {
      request.rateLimitHeaders = await options.quotas.admit(request.tenant);
    } catch (err) {
      if (err instanceof QuotaRefusal) reply.headers(err.headers);
      throw err;
    }
  });

  const send = (
    request: FastifyRequest,
    reply: FastifyReply,
    upstreamBody: object | undefined,
    stream: { dialect: StreamDialect; dropUsageChunk: boolean } | undefined,
  ) => relay(options, request, reply, upstreamBody, stream);

  app.post(
    '/v1/generate',
    {
      schema: {
        summary: 'Generate text; SSE when stream is true',
        produces,
        body: generateRequestSchema,
        security,
        response: { 200: generateResponseSchema, ...errors },
      },
    },
    (request, reply) =>
      send(
        request,
        reply,
        request.body,
        request.body.stream ? { dialect: 'generate', dropUsageChunk: false } : undefined,
      ),
  );

  app.post(
    '/v1/completions',
    {
      preValidation: dropNullFields,
      schema: {
        summary: 'OpenAI-compatible completions',
        produces,
        body: completionRequestSchema,
        security,
        response: { 200: completionResponseSchema, ...errors },
      },
    },
    // No nulls left: dropNullFields ran first.
    (request, reply) => send(request, reply, ...withStreamUsage(request.body as CompletionRequest)),
  );

  app.post(
    '/v1/chat/completions',
    {
      preValidation: dropNullFields,
      schema: {
        summary: 'OpenAI-compatible chat completions',
        produces,
        body: chatCompletionRequestSchema,
        security,
        response: { 200: chatCompletionResponseSchema, ...errors },
      },
    },
    // No nulls left: dropNullFields ran first.
    (request, reply) => send(request, reply, ...withStreamUsage(request.body as ChatCompletionRequest)),
  );

  app.get(
    '/v1/models',
    { schema: { summary: 'Models served', security, response: { 200: modelListSchema, ...errors } } },
    (request, reply) => send(request, reply, undefined, undefined),
  );
};

/**
 * An OpenAI stream reports usage only when asked (stream_options.include_usage). The edge asks
 * for it so it can charge tokens, and drops the extra chunk when the client did not ask.
 */
function withStreamUsage(body: {
  stream?: boolean | undefined;
  stream_options?: { include_usage?: boolean | undefined } | null | undefined;
}): [object, { dialect: StreamDialect; dropUsageChunk: boolean } | undefined] {
  checkStreamOptions({ stream: body.stream === true, stream_options: body.stream_options });
  if (!body.stream) return [body, undefined];
  const asked = body.stream_options?.include_usage === true;
  const upstream = asked
    ? body
    : { ...body, stream_options: { ...body.stream_options, include_usage: true } };
  return [upstream, { dialect: 'openai', dropUsageChunk: !asked }];
}

async function relay(
  options: PublicRoutesOptions,
  request: FastifyRequest,
  reply: FastifyReply,
  upstreamBody: object | undefined,
  stream: { dialect: StreamDialect; dropUsageChunk: boolean } | undefined,
): Promise<void> {
  const endpoint = request.routeOptions.url ?? request.url;
  const { tenant } = request;
  // The body's priority wins over the header's, as at the backend; either is clamped to the
  // tenant's tier, so no tenant gets ahead of a better tier by asking.
  const bodyPriority = (upstreamBody as { priority?: unknown } | undefined)?.priority;
  const asked =
    typeof bodyPriority === 'number' ? bodyPriority : priorityHeader(request.headers[HEADERS.priority]);
  const priority = grantPriority(tenant.tier, asked);
  const body = typeof bodyPriority === 'number' ? { ...upstreamBody, priority } : upstreamBody;
  // Only the propagated headers go on, and tenant, priority and identity are always the edge's
  // own: anything internal a client sent stays here.
  const headers: Record<string, string> = {
    ...propagationHeaders(request.headers),
    [HEADERS.requestId]: request.id,
    [HEADERS.tenant]: tenant.name,
    [HEADERS.priority]: String(priority),
  };
  delete headers[HEADERS.identity];
  if (options.identityKey) {
    headers[HEADERS.identity] = signIdentity(
      {
        tenant: tenant.name,
        tier: tenant.tier.name,
        priority,
        requestId: request.id,
        expiresAtMs: Date.now() + IDENTITY_TTL_MS,
      },
      options.identityKey,
    );
  }
  if (body !== undefined) headers['content-type'] = 'application/json';
  const tap = stream ? sseUsageTap({ dropUsageChunk: stream.dropUsageChunk }) : jsonUsageTap();
  const started = performance.now();
  try {
    const result = await forward(
      options.router,
      {
        method: body === undefined ? 'GET' : 'POST',
        path: endpoint,
        headers,
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        responseHeaders: request.rateLimitHeaders,
        dialect: stream?.dialect ?? 'generate',
        tap,
        onUpstreamHeaders: () =>
          options.metrics.upstreamSeconds.observe({ endpoint }, (performance.now() - started) / 1e3),
      },
      reply,
    );
    options.metrics.requests.inc({ endpoint, outcome: result.outcome });
    const tokens = tap.tokens(); // once: a JSON answer's usage is parsed here
    request.log.info(
      {
        tenant: tenant.name,
        tier: tenant.tier.name,
        priority,
        outcome: result.outcome,
        status: result.status ?? null,
        tokens,
      },
      'request forwarded',
    );
    void options.quotas.charge(request.tenant, tokens);
  } catch (err) {
    options.metrics.requests.inc({ endpoint, outcome: 'upstream_error' });
    // What streamed before the failure still counts.
    void options.quotas.charge(request.tenant, tap.tokens());
    throw err;
  }
}
