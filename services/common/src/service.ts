// The base every Strata service is built on: a Fastify 5 app with request ids, structured
// request logs, catalogue errors, /health/live, /health/ready and /metrics, and the guards
// against hostile input of request-guards.ts. Services register their own routes on top as
// plugins.

import type { Socket } from 'node:net';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  LogController,
} from 'fastify';
import type { Logger } from 'pino';
import { DEFAULT_HTTP_LIMITS, type HttpLimits } from './config.js';
import { errorBodyJsonSchema, StrataError } from './errors.js';
import { HEADERS, requestIdFrom } from './headers.js';
import { requestTraceId, traceRequests } from './http-span.js';
import { metricsText, type ServiceMetrics } from './metrics.js';
import { Readiness } from './readiness.js';
import {
  answerClientError,
  applyHttpLimits,
  guardJsonBodies,
  rejectInvalidHeaderBytes,
} from './request-guards.js';

export interface ServiceAppOptions {
  name: string;
  logger: Logger;
  metrics: ServiceMetrics;
  readiness?: Readiness;
  /** Largest accepted request body, in bytes. */
  bodyLimit?: number;
  /**
   * A SERVER span per request (http-span.ts) whose context replaces the request's traceparent,
   * for services that forward requests. 'originate' (the edge) also starts a trace when the
   * client sent none or a malformed one, so every hop and log line after it carries one id.
   */
  traceRequests?: 'continue' | 'originate';
  /**
   * Limits on what clients send (config.ts httpLimitsSchema); the defaults when absent.
   * bootService applies the configured ones (config.http) after the service's build.
   */
  http?: Partial<HttpLimits>;
}

declare module 'fastify' {
  interface FastifyInstance {
    readiness: Readiness;
    metrics: ServiceMetrics;
    /** In force for this app; change them with applyHttpLimits, before listen. */
    readonly httpLimits: HttpLimits;
  }
}

const readinessSchema = {
  type: 'object',
  required: ['ready', 'draining', 'checks'],
  properties: {
    ready: { type: 'boolean' },
    draining: { type: 'boolean' },
    checks: {
      type: 'object',
      additionalProperties: {
        type: 'object',
        required: ['ok'],
        properties: { ok: { type: 'boolean' }, detail: { type: 'string' } },
      },
    },
  },
} as const;

interface ValidationIssue {
  instancePath?: string;
  message?: string;
}

/**
 * One line naming each bad field and what is wrong with it, e.g.
 * `max_tokens: Too big: expected number to be <=1000000; temprature: Unrecognized key`.
 */
export function validationMessage(err: FastifyError): string {
  const context = err.validationContext ?? 'body';
  const parts = (err.validation as ValidationIssue[]).map((issue) => {
    const path = (issue.instancePath ?? '').replace(/^\//, '').replaceAll('/', '.');
    const field = context === 'body' ? path || 'body' : path ? `${context}.${path}` : context;
    return `${field}: ${issue.message ?? 'invalid'}`;
  });
  return `Invalid request: ${parts.join('; ')}`;
}

// Fastify's own errors (bad JSON, body too large, wrong content type) mapped to the catalogue.
export function toStrataError(err: FastifyError): StrataError {
  if (err instanceof StrataError) return err;
  if (err.validation) return new StrataError('STRATA_INVALID_REQUEST', validationMessage(err));
  switch (err.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new StrataError('STRATA_BODY_TOO_LARGE', err.message);
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new StrataError('STRATA_UNSUPPORTED_MEDIA_TYPE');
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new StrataError('STRATA_INVALID_REQUEST', 'Content-Length does not match the body sent.');
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return new StrataError('STRATA_INVALID_JSON', err.message);
  }
  if (err instanceof SyntaxError) return new StrataError('STRATA_INVALID_JSON', err.message);
  if (err.statusCode === 413) return new StrataError('STRATA_BODY_TOO_LARGE');
  if (err.statusCode === 415) return new StrataError('STRATA_UNSUPPORTED_MEDIA_TYPE');
  if (err.statusCode !== undefined && err.statusCode >= 400 && err.statusCode < 500) {
    return new StrataError('STRATA_INVALID_REQUEST', err.message);
  }
  // Unknown failures never leak internals to the client; the log keeps the detail.
  return new StrataError('STRATA_INTERNAL');
}

// Once the listener closes, connections must not outlive their last response, or app.close()
// and with it a drain wait for clients to hang up:
// - Node closes idle keep-alive connections once, when close() is called; those whose response
//   ends later stay open for the keep-alive timeout (httpLimits.keepAliveTimeoutMs, 72 s, and
//   clients told so keep them that long). They are closed as soon as they turn idle.
// - A connection that has not sent a byte carries no request, yet Node counts it as busy until
//   its headers timeout (httpLimits.headersTimeoutMs). Clients that connect ahead of need
//   (undici pools after a cancelled stream, proxies that preconnect) leave such connections;
//   they are closed once silent for UNUSED_CONNECTION_GRACE_MS.
const UNUSED_CONNECTION_GRACE_MS = 500;
const CLOSING_SWEEP_MS = 100;

function closeConnectionsWhenDone(app: FastifyInstance): void {
  const server = app.server;
  const accepted = new Map<Socket, number>();
  server.on('connection', (socket: Socket) => {
    accepted.set(socket, performance.now());
    socket.once('close', () => accepted.delete(socket));
  });
  // Starts with the listener's close (Fastify calls it at once on app.close(); a hook would
  // delay it by a tick and let connections in meanwhile).
  const close = server.close.bind(server);
  server.close = (callback?: (err?: Error) => void) => {
    const sweep = setInterval(() => {
      server.closeIdleConnections();
      const now = performance.now();
      for (const [socket, at] of accepted) {
        if (socket.bytesRead === 0 && now - at >= UNUSED_CONNECTION_GRACE_MS) socket.destroy();
      }
    }, CLOSING_SWEEP_MS);
    sweep.unref();
    server.once('close', () => clearInterval(sweep));
    return close(callback);
  };
}

// Fastify answers a body over the limit before reading it, and closes the connection. A client
// still uploading then fails on a write (EPIPE) or loses the 413 to the reset, instead of
// reading it. When the request declared a length up to DRAIN_BODY_MAX_BYTES, the connection
// stays open instead and Node reads and drops the rest of the body after the response (as
// nginx's lingering close does): the client gets its 413 and may reuse the connection. A larger
// or undeclared (chunked) body still closes it.
const DRAIN_BODY_MAX_BYTES = 64 * 1024 * 1024;

function keepConnectionToDrain(request: FastifyRequest, reply: FastifyReply): void {
  const declared = Number(request.headers['content-length']);
  if (Number.isFinite(declared) && declared <= DRAIN_BODY_MAX_BYTES) reply.removeHeader('connection');
}

function hasNoKeys(o: object): boolean {
  for (const _ in o) return false;
  return true;
}

export function createServiceApp(options: ServiceAppOptions): FastifyInstance {
  const readiness = options.readiness ?? new Readiness();
  const httpLimits: HttpLimits = { ...DEFAULT_HTTP_LIMITS };
  const app = Fastify({
    // pino's Logger is a FastifyBaseLogger; the cast keeps the app's type the default one.
    loggerInstance: options.logger as FastifyBaseLogger,
    genReqId: (req) => requestIdFrom(req.headers),
    // One logger per request, bound to its request id and trace id at once. Binding the trace id
    // in a hook made a child of each request's child, about 30 µs a request with its two log
    // lines against 7 µs for one child (pino 9); the options Fastify passes are empty unless a
    // route sets a log level, and an empty object takes pino's slower path for children.
    childLoggerFactory: (logger, bindings, opts, raw) => {
      const traceId = requestTraceId(raw, options.traceRequests === 'originate');
      return logger.child(
        traceId === undefined ? bindings : { ...bindings, trace_id: traceId },
        hasNoKeys(opts) ? undefined : opts,
      );
    },
    // Fastify's per-request lines are replaced by one 'request completed' line (onResponse).
    logController: new LogController({ requestIdLogLabel: 'request_id', disableRequestLogging: true }),
    bodyLimit: options.bodyLimit ?? 1024 * 1024,
    return503OnClosing: true,
    clientErrorHandler: answerClientError(options.logger, () => httpLimits),
  });
  app.decorate('readiness', readiness);
  app.decorate('metrics', options.metrics);
  app.decorate('httpLimits', httpLimits);
  applyHttpLimits(app, { ...DEFAULT_HTTP_LIMITS, ...options.http });
  guardJsonBodies(app);
  closeConnectionsWhenDone(app);
  correlateRequests(app, options);
  logAndCountResponses(app, options.metrics);
  answerErrorsFromTheCatalogue(app);
  answerUnknownRoutes(app);
  addBaseRoutes(app, readiness, options.metrics);
  return app;
}

// Request ids on every request and its response (its log lines carry them and the trace id:
// childLoggerFactory above); header bytes that are not valid UTF-8 refused once the id is set.
function correlateRequests(app: FastifyInstance, options: ServiceAppOptions): void {
  // First, so that the request's span covers every later hook.
  if (options.traceRequests) {
    traceRequests(app, options.name, { originate: options.traceRequests === 'originate' });
  }
  app.addHook('onRequest', (request, reply, done) => {
    reply.header(HEADERS.requestId, request.id);
    done();
  });
  // After the hook above, so that the 400 carries the request id.
  app.addHook('onRequest', rejectInvalidHeaderBytes);
}

// Every response counted and timed by method, route and status; one 'request completed' line
// per request except health checks and scrapes.
function logAndCountResponses(app: FastifyInstance, metrics: ServiceMetrics): void {
  app.addHook('onResponse', (request, reply, done) => {
    const route = request.routeOptions.url ?? 'unmatched';
    const labels = { method: request.method, route, status: String(reply.statusCode) };
    const seconds = reply.elapsedTime / 1000;
    metrics.httpRequests.inc(labels);
    metrics.httpDuration.observe(labels, seconds);
    if (!route.startsWith('/health') && route !== '/metrics') {
      request.log.info(
        {
          method: request.method,
          url: request.url,
          status: reply.statusCode,
          duration_ms: reply.elapsedTime,
        },
        'request completed',
      );
    }
    done();
  });
}

// Every failure answers with a catalogue body; 5xx are logged as errors, the rest as rejections.
function answerErrorsFromTheCatalogue(app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError, request, reply) => {
    const strataError = toStrataError(err);
    if (strataError.code === 'STRATA_BODY_TOO_LARGE') keepConnectionToDrain(request, reply);
    if (strataError.statusCode >= 500) request.log.error({ err }, 'request failed');
    else request.log.info({ code: strataError.code, message: strataError.message }, 'request rejected');
    if (strataError.retryAfterSeconds !== undefined)
      reply.header('retry-after', String(strataError.retryAfterSeconds));
    return reply.code(strataError.statusCode).send(strataError.toBody());
  });
}

// The methods of each path, so that a known path asked with another method gets a 405 with
// Allow (as HTTP says and FastAPI/vLLM answer) rather than a 404. Every route here is a
// static path; a parametric one would only ever fall through to the 404.
function answerUnknownRoutes(app: FastifyInstance): void {
  const methodsByPath = new Map<string, Set<string>>();
  app.addHook('onRoute', (route) => {
    const methods = methodsByPath.get(route.url) ?? new Set<string>();
    for (const method of [route.method].flat()) methods.add(method);
    methodsByPath.set(route.url, methods);
  });
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0] as string;
    const allowed = methodsByPath.get(path);
    if (allowed) {
      const allow = [...allowed].sort().join(', ');
      const err = new StrataError(
        'STRATA_METHOD_NOT_ALLOWED',
        `${request.method} is not allowed on ${path}; use ${allow}.`,
      );
      return reply.code(err.statusCode).header('allow', allow).send(err.toBody());
    }
    const err = new StrataError('STRATA_NOT_FOUND', `No route ${request.method} ${path}.`);
    return reply.code(err.statusCode).send(err.toBody());
  });
}

/**
 * Moves `app`'s /metrics to a server of its own on `port` (0: a free one), which answers only
 * GET /metrics; on the API port /metrics then answers 404 like any unknown path. Returns the
 * server's address; it closes with `app` (call before app.listen).
 */
export async function serveMetricsOnOwnPort(
  app: FastifyInstance,
  host: string,
  port: number,
): Promise<string> {
  hideMetricsRoute(app);
  const metricsApp = Fastify({ logger: false, return503OnClosing: false });
  metricsApp.get('/metrics', async (_request, reply) => {
    const body = await metricsText(app.metrics);
    return reply.type(app.metrics.registry.contentType).send(body);
  });
  metricsApp.setNotFoundHandler((request, reply) => {
    const err = new StrataError(
      'STRATA_NOT_FOUND',
      `This port serves GET /metrics only, not ${request.method} ${request.url}.`,
    );
    return reply.code(err.statusCode).send(err.toBody());
  });
  app.addHook('onClose', async () => {
    await metricsApp.close();
  });
  return metricsApp.listen({ host, port });
}

/** `app`'s /metrics answers 404 like any unknown path (it is served on a port of its own). */
export function hideMetricsRoute(app: FastifyInstance): void {
  app.addHook('onRequest', async (request, reply) => {
    if (request.routeOptions.url !== '/metrics') return;
    const err = new StrataError('STRATA_NOT_FOUND', `No route ${request.method} /metrics on this port.`);
    return reply.code(err.statusCode).send(err.toBody());
  });
}

// /health/live, /health/ready (every readiness check) and /metrics, on every service.
function addBaseRoutes(app: FastifyInstance, readiness: Readiness, metrics: ServiceMetrics): void {
  app.get(
    '/health/live',
    {
      schema: {
        response: { 200: { type: 'object', required: ['status'], properties: { status: { const: 'ok' } } } },
      },
    },
    async () => ({ status: 'ok' as const }),
  );

  app.get(
    '/health/ready',
    { schema: { response: { 200: readinessSchema, 503: readinessSchema } } },
    async (_request, reply) => {
      const report = readiness.report();
      return reply.code(report.ready ? 200 : 503).send(report);
    },
  );

  app.get(
    '/metrics',
    { schema: { response: { 200: { type: 'string' }, 500: errorBodyJsonSchema } } },
    async (_request, reply) => {
      const body = await metricsText(metrics);
      return reply.type(metrics.registry.contentType).send(body);
    },
  );
}
