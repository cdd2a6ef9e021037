// A SERVER span per HTTP request, for the hops that only pass requests on (edge, router): child
// of the caller's W3C traceparent, and the request's traceparent is rewritten to this span, so
// whatever the service forwards continues the trace from here. Ended when the response is done
// or the connection closes (streams included). With tracing off the tracer is the API's no-op:
// nothing is recorded and the traceparent is left as it came, except at the edge, which still
// starts a trace id for the logs (childTraceparent); the id is chosen when the request's logger
// is made (requestTraceId), so that its log lines and what it forwards carry the same one.
import type { IncomingMessage } from 'node:http';
import { type Context, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { childTraceparent, formatTraceparent, HEADERS, newTraceId, parseTraceparent } from './headers.js';
import { requestLogger } from './logger.js';

// Trace ids started for requests that came without a valid traceparent, until their span hook
// forwards them.
const originated = new WeakMap<IncomingMessage, string>();

/**
 * The trace id a request's log lines carry, decided before its hooks run (service.ts makes the
 * request's logger with it): the incoming traceparent's, else, where the service originates
 * traces (`originate`), a new one that traceRequests then forwards; else none.
 */
export function requestTraceId(raw: IncomingMessage, originate: boolean): string | undefined {
  const incoming = parseTraceparent(raw.headers[HEADERS.traceparent])?.traceId;
  if (incoming !== undefined || !originate) return incoming;
  const traceId = newTraceId();
  originated.set(raw, traceId);
  return traceId;
}

/** The context of an incoming traceparent (a remote parent), or the root when there is none. */
export function parentContext(traceparent: unknown): Context {
  const parent = parseTraceparent(traceparent);
  if (!parent) return ROOT_CONTEXT;
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId: parent.traceId,
    spanId: parent.parentId,
    traceFlags: Number.parseInt(parent.flags, 16) & 1,
    isRemote: true,
  });
}

export function traceRequests(app: FastifyInstance, service: string, options: { originate: boolean }): void {
  const tracer = trace.getTracer(service);
  // A callback hook: a few microseconds less per request than an async one.
  app.addHook('onRequest', (request, reply, done) => {
    const incoming = request.headers[HEADERS.traceparent];
    const route = request.routeOptions.url ?? 'unmatched';
    const span = tracer.startSpan(
      `${request.method} ${route}`,
      {
        kind: SpanKind.SERVER,
        attributes: {
          'http.request.method': request.method,
          'http.route': route,
          'strata.request_id': request.id,
        },
      },
      parentContext(incoming),
    );
    const logged = originated.get(request.raw);
    originated.delete(request.raw);
    if (!span.isRecording()) {
      // A no-op span: nothing to end. At the edge the trace starts here, with the logs' id.
      if (options.originate) {
        request.headers[HEADERS.traceparent] = formatTraceparent(childTraceparent(incoming, logged));
      }
      done();
      return;
    }
    const { traceId, spanId, traceFlags } = span.spanContext();
    request.headers[HEADERS.traceparent] =
      `00-${traceId}-${spanId}-${traceFlags.toString(16).padStart(2, '0')}`;
    // A span without a parent starts its own trace: the logs follow it.
    if (traceId !== (parseTraceparent(incoming)?.traceId ?? logged)) {
      request.log = requestLogger(app.log as Logger, { requestId: request.id, traceId });
    }
    reply.raw.once('close', () => {
      const status = reply.raw.statusCode;
      span.setAttribute('http.response.status_code', status);
      if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      if (!reply.raw.writableFinished) span.setAttribute('strata.client_closed', true);
      span.end();
    });
    done();
  });
}
