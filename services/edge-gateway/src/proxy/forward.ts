// Sends one accepted request to the router and the answer back to the client. No retries here
// (the router retries across backends before its first byte). The body streams through with
// backpressure, a client that leaves cancels the upstream request, and the usage tap reads
// what the request cost. Failures before the answer starts are catalogue errors; a failure
// mid-stream becomes the stream's error event.

import { HEADERS, StrataError } from '@strata/common';
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

/** The reason the edge aborts an upstream request whose client left. */
class ClientClosed extends Error {
  constructor() {
    super('The client closed the connection.');
  }
}

/**
 * Forwards one request and streams the answer back; resolves when the answer is done (or the
 * client left), rejects with a catalogue error when the router did not answer.
 *
 * It runs on undici's dispatch handlers rather than request(): each chunk is passed on as the
 * router's bytes are parsed, so the head, the events already there and the end of a short answer
 * leave in one write to the client (Node corks the socket for the tick). With request(), a body
 * stream, an abort signal and a promise per chunk, the head flushed on its own and the end in a
 * later tick made three writes (system calls) per answer, a good part of the edge's CPU time.
 */
export function forward(
  router: Dispatcher,
  req: UpstreamRequest,
  reply: FastifyReply,
): Promise<ForwardResult> {
  const res = reply.raw;
  return new Promise<ForwardResult>((resolve, reject) => {
    let controller: Dispatcher.DispatchController | undefined;
    // The router's status, once its headers arrived.
    let status: number | undefined;
    let sse = false;
    let clientGone = false;
    let wrote = false;
    let settled = false;

    const onClose = () => {
      if (res.writableFinished) return;
      clientGone = true;
      // Not yet sent (waiting for a connection): aborted as soon as it is.
      controller?.abort(new ClientClosed());
    };
    const onDrain = () => controller?.resume();
    const finish = (result: ForwardResult | undefined, err?: Error) => {
      if (settled) return;
      settled = true;
      res.off('close', onClose);
      res.off('drain', onDrain);
      if (result) resolve(result);
      else reject(err);
    };
    // The client is slower than the router: the router waits until the client has read.
    const write = (chunk: Buffer | string) => {
      wrote = true;
      if (res.write(chunk) || controller === undefined) return;
      controller.pause();
      res.once('drain', onDrain);
    };
    // An event stream's head goes out at once, its first event may be long in coming; when the
    // event is already here (parsed in the same read), the head goes out with it instead.
    const flushHead = () => {
      if (!wrote && !res.destroyed) res.flushHeaders();
    };
    res.on('close', onClose);

    router.dispatch(
      {
        method: req.method,
        path: req.path,
        headers: req.headers,
        ...(req.body !== undefined ? { body: req.body } : {}),
      },
      {
        onRequestStart(c) {
          controller = c;
          if (clientGone) c.abort(new ClientClosed());
        },
        onResponseStart(_c, statusCode, upstreamHeaders) {
          if (statusCode < 200) return; // informational: the answer follows
          status = statusCode;
          try {
            req.onUpstreamHeaders?.(statusCode);
            reply.hijack();
            const headers: Record<string, string> = {
              ...req.responseHeaders,
              [HEADERS.requestId]: reply.request.id,
            };
            for (const name of PASSED_HEADERS) {
              const value = upstreamHeaders[name];
              if (typeof value === 'string') headers[name] = value;
            }
            sse = (headers['content-type'] ?? '').startsWith('text/event-stream');
            res.writeHead(statusCode, headers);
            if (sse) {
              res.socket?.setNoDelay(true);
              process.nextTick(flushHead);
            }
          } catch (err) {
            // A head Node refuses to write: the client's connection cannot carry an answer now.
            finish(undefined, err as Error);
            res.destroy();
            controller?.abort(err as Error);
          }
        },
        onResponseData(_c, chunk) {
          if (res.destroyed || settled) return; // the client left: onClose aborts
          const out = req.tap.push(chunk);
          if (out) write(out);
        },
        onResponseEnd() {
          if (settled || status === undefined) return;
          const rest = req.tap.flush();
          if (res.destroyed) {
            finish({ outcome: 'client_closed', status });
            return;
          }
          if (rest) write(rest);
          res.end();
          finish({ outcome: status >= 500 ? 'upstream_error' : 'forwarded', status });
        },
        onResponseError(_c, err) {
          if (settled) return;
          if (status === undefined) {
            if (clientGone) {
              // Nobody is left to answer: take the reply over so Fastify does not try to.
              reply.hijack();
              res.destroy();
              finish({ outcome: 'client_closed' });
            } else {
              finish(undefined, upstreamFailure(err));
            }
            return;
          }
          if (clientGone || res.destroyed) {
            finish({ outcome: 'client_closed', status });
            return;
          }
          reply.request.log.error({ err: err.message }, 'router failed mid-response');
          if (sse) {
            const error = new StrataError('STRATA_UPSTREAM_ERROR', 'The response broke off upstream.');
            res.end(streamError(req.dialect, error));
          } else {
            res.destroy();
          }
          finish({ outcome: 'upstream_error', status });
        },
      },
    );
  });
}
