// What a route hands the runtime about the HTTP request for logs and tracing: its id and the
// incoming W3C traceparent (the request's span becomes a child of the caller's).
import { HEADERS } from '@strata/common';
import type { FastifyRequest } from 'fastify';

export function requestContext(request: FastifyRequest): { requestId: string; traceparent?: string } {
  const traceparent = request.headers[HEADERS.traceparent];
  return {
    requestId: request.id,
    ...(typeof traceparent === 'string' ? { traceparent } : {}),
  };
}
