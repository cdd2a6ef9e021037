// A SERVER span per HTTP request, for the hops that only pass requests on (edge, router): child
// of the caller's W3C traceparent, and the request's traceparent is rewritten to this span, so
// whatever the service forwards continues the trace from here. Ended when the response is done
// or the connection closes (streams included). With tracing off the tracer is the API's no-op:
// nothing is recorded and the traceparent is left as it came, except at the edge, which still
// starts a trace id for the logs (childTraceparent).
import { type Context, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { FastifyInstance } from 'fastify';
import { childTraceparent, formatTraceparent, HEADERS, parseTraceparent } from './headers.js';

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
  app.addHook('onRequest', async (request, reply) => {
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
    if (span.isRecording()) {
      const { traceId, spanId, traceFlags } = span.spanContext();
      request.headers[HEADERS.traceparent] =
        `00-${traceId}-${spanId}-${traceFlags.toString(16).padStart(2, '0')}`;
    } else if (options.originate) {
      request.headers[HEADERS.traceparent] = formatTraceparent(childTraceparent(incoming));
    }
    reply.raw.once('close', () => {
      const status = reply.raw.statusCode;
      span.setAttribute('http.response.status_code', status);
      if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      if (!reply.raw.writableFinished) span.setAttribute('strata.client_closed', true);
      span.end();
    });
  });
}
