// Sends one accepted request to the router and the answer back to the client. No retries here
// (the router retries across backends before its first byte). The body streams through with
// backpressure, a client that leaves cancels the upstream request, and the usage tap reads
// what the request cost. Failures before the answer starts are catalogue errors; a failure
// mid-stream becomes the stream's error event.

import { HEADERS, StrataError, writeWithBackpressure } from '@strata/common';
import type { FastifyReply } from 'fastify';
import { type Dispatcher, errors as undiciErrors } from 'undici';
import type { UsageTap } from './usage-tap.js';

/** How an SSE stream of this endpoint reports an error: /v1/generate's event or OpenAI's. */
export type StreamDialect = 'generate' | 'openai';

export interface UpstreamRequest {
  method: 'GET' | 'POST';
  path: string;
  headers: Record<string, string>;
  body?: string;
  /** Headers the edge adds to the client's response (rate limits). */
  responseHeaders: Record<string, string>;
  dialect: StreamDialect;
  tap: UsageTap;
  /** Called when the router's response headers arrive. */
  onUpstreamHeaders?: (status: number) => void;
}

export type ForwardOutcome = 'forwarded' | 'upstream_error' | 'client_closed';

export interface ForwardResult {
  outcome: ForwardOutcome;
  status?: number;
}

// The router's response headers that reach the client; hop-by-hop ones stay behind.
const PASSED_HEADERS = [
  'content-type',
  'cache-control',
  'retry-after',
  'x-accel-buffering',
  HEADERS.backend,
  HEADERS.route,
];

function upstreamFailure(err: Error): StrataError {
  if (err instanceof undiciErrors.HeadersTimeoutError) {
    return new StrataError('STRATA_UPSTREAM_TIMEOUT', 'The router did not answer in time.');
  }
  // The router's address is internal: the client learns only that it failed.
  return new StrataError('STRATA_UPSTREAM_ERROR', 'The router could not be reached.', { cause: err });
}

function streamError(dialect: StreamDialect, error: StrataError): string {
  const body = error.toBody();
  return dialect === 'generate'
    ? `data: ${JSON.stringify({ type: 'error', error: body.error })}\n\n`
    : `data: ${JSON.stringify(body)}\n\ndata: [DONE]\n\n`;
}

export async function forward(
  router: Dispatcher,
  req: UpstreamRequest,
  reply: FastifyReply,
): Promise<ForwardResult> {
  const res = reply.raw;
  const controller = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) controller.abort();
  };
  res.on('close', onClose);
  let upstream: Dispatcher.ResponseData;
  try {
    upstream = await router.request({
      method: req.method,
      path: req.path,
      headers: req.headers,
      ...(req.body !== undefined ? { body: req.body } : {}),
      signal: controller.signal,
    });
  } catch (err) {
    res.off('close', onClose);
    if (controller.signal.aborted) {
      // Nobody is left to answer: take the reply over so Fastify does not try to.
      reply.hijack();
      res.destroy();
      return { outcome: 'client_closed' };
    }
    throw upstreamFailure(err as Error);
  }

  req.onUpstreamHeaders?.(upstream.statusCode);
  reply.hijack();
  const headers: Record<string, string> = { ...req.responseHeaders, [HEADERS.requestId]: reply.request.id };
  for (const name of PASSED_HEADERS) {
    const value = upstream.headers[name];
    if (typeof value === 'string') headers[name] = value;
  }
  const sse = (headers['content-type'] ?? '').startsWith('text/event-stream');
  res.writeHead(upstream.statusCode, headers);
  if (sse) {
    res.socket?.setNoDelay(true);
    res.flushHeaders();
  }
  const outcome: ForwardOutcome = upstream.statusCode >= 500 ? 'upstream_error' : 'forwarded';
  try {
    for await (const chunk of upstream.body) {
      if (res.destroyed) break;
      const out = req.tap.push(chunk as Buffer);
      if (out) await writeWithBackpressure(res, out);
    }
    const rest = req.tap.flush();
    if (rest && !res.destroyed) await writeWithBackpressure(res, rest);
    if (res.destroyed) return { outcome: 'client_closed', status: upstream.statusCode };
    res.end();
    return { outcome, status: upstream.statusCode };
  } catch (err) {
    if (res.destroyed || controller.signal.aborted)
      return { outcome: 'client_closed', status: upstream.statusCode };
    reply.request.log.error({ err: (err as Error).message }, 'router failed mid-response');
    if (sse) {
      const error = new StrataError('STRATA_UPSTREAM_ERROR', 'The response broke off upstream.');
      res.end(streamError(req.dialect, error));
    } else {
      res.destroy();
    }
    return { outcome: 'upstream_error', status: upstream.statusCode };
  } finally {
    res.off('close', onClose);
  }
}
