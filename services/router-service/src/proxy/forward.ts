// Forwards one request through an ordered candidate list with undici. A candidate is tried
// until the first byte of its response body is in hand; only then does anything reach the
// client, so connection errors, 5xx and bodies that fail before their first byte move on to the
// next candidate within the retry budget. 4xx answers are the client's and pass through as
// they are. After the first byte the stream is piped with backpressure; if the upstream dies
// then, an SSE client gets a clean error event, any other client a cut connection.
import { HEADERS, StrataError, writeWithBackpressure } from '@strata/common';
import type { FastifyReply } from 'fastify';
import { type Dispatcher, request } from 'undici';

export interface Candidate {
  name: string;
  url: string;
}

export interface RetryBudget {
  /** Candidates tried at most. */
  attempts: number;
  /** Time after which no new attempt starts, in ms from the start of forwarding. */
  deadlineMs: number;
}

export interface Attempt {
  backend: string;
  outcome: 'ok' | 'client_error' | 'connect_error' | 'upstream_5xx' | 'body_error' | 'aborted';
  status?: number;
  ms: number;
  error?: string;
}

export interface ForwardRequest {
  method: 'GET' | 'POST';
  path: string;
  headers: Record<string, string>;
  body?: string | Uint8Array;
  /** Aborted when the client goes away: the upstream request is cancelled. */
  signal: AbortSignal;
  /** Added to the response as x-strata-route. */
  route: string;
}

export interface ForwardResult {
  backend?: string;
  attempts: Attempt[];
  /** The response started and the upstream failed mid-body. */
  failedAfterFirstByte: boolean;
}

// Response headers worth passing on; hop-by-hop ones are the proxy's own business.
const PASSED_HEADERS = ['content-type', 'cache-control', 'retry-after', 'x-request-id', 'x-accel-buffering'];

async function firstChunk(body: Dispatcher.ResponseData['body']): Promise<Buffer | undefined> {
  const iterator = body[Symbol.asyncIterator]();
  const { value, done } = await iterator.next();
  return done ? undefined : (value as Buffer);
}

export async function forward(
  req: ForwardRequest,
  candidates: readonly Candidate[],
  budget: RetryBudget,
  reply: FastifyReply,
  onFailure: (backend: string) => void,
  onSuccess: (backend: string) => void,
): Promise<ForwardResult> {
  const started = Date.now();
  const attempts: Attempt[] = [];
  for (const candidate of candidates.slice(0, budget.attempts)) {
    if (attempts.length > 0 && Date.now() - started >= budget.deadlineMs) break;
    if (req.signal.aborted) break;
    const t0 = Date.now();
    let upstream: Dispatcher.ResponseData;
    try {
      upstream = await request(new URL(req.path, candidate.url), {
        method: req.method,
        headers: req.headers,
        ...(req.body !== undefined ? { body: req.body } : {}),
        signal: req.signal,
        headersTimeout: budget.deadlineMs,
        bodyTimeout: 0, // streams may idle between tokens; heartbeats come from the backend
      });
    } catch (err) {
      const aborted = req.signal.aborted;
      attempts.push({
        backend: candidate.name,
        outcome: aborted ? 'aborted' : 'connect_error',
        ms: Date.now() - t0,
        error: (err as Error).message,
      });
      if (aborted) break;
      onFailure(candidate.name);
      continue;
    }
    if (upstream.statusCode >= 500) {
      attempts.push({
        backend: candidate.name,
        outcome: 'upstream_5xx',
        status: upstream.statusCode,
        ms: Date.now() - t0,
      });
      await upstream.body.dump().catch(() => {});
      // 503 from a backend that is draining or overloaded is not a fault to eject it for.
      if (upstream.statusCode !== 503) onFailure(candidate.name);
      continue;
    }
    let head: Buffer | undefined;
    try {
      head = await firstChunk(upstream.body);
    } catch (err) {
      const aborted = req.signal.aborted;
      attempts.push({
        backend: candidate.name,
        outcome: aborted ? 'aborted' : 'body_error',
        status: upstream.statusCode,
        ms: Date.now() - t0,
        error: (err as Error).message,
      });
      if (aborted) break;
      onFailure(candidate.name);
      continue;
    }
    // Committed: from here on this backend answers the client.
    attempts.push({
      backend: candidate.name,
      outcome: upstream.statusCode >= 400 ? 'client_error' : 'ok',
      status: upstream.statusCode,
      ms: Date.now() - t0,
    });
    onSuccess(candidate.name);
    const failedAfterFirstByte = await relay(upstream, head, candidate.name, req.route, reply);
    return { backend: candidate.name, attempts, failedAfterFirstByte };
  }
  if (req.signal.aborted) return { attempts, failedAfterFirstByte: false };
  const tried = attempts.map((a) => `${a.backend}: ${a.outcome}${a.status ? ` ${a.status}` : ''}`).join(', ');
  throw new StrataError(
    attempts.length === 0 ? 'STRATA_NO_BACKEND' : 'STRATA_UPSTREAM_ERROR',
    attempts.length === 0 ? 'no backend is ready for this request' : `every candidate failed (${tried})`,
    { details: { attempts } },
  );
}

// Writes the upstream response to the client; returns true if the upstream failed mid-body.
async function relay(
  upstream: Dispatcher.ResponseData,
  head: Buffer | undefined,
  backend: string,
  route: string,
  reply: FastifyReply,
): Promise<boolean> {
  const res = reply.raw;
  reply.hijack();
  const headers: Record<string, string> = { [HEADERS.backend]: backend, [HEADERS.route]: route };
  for (const name of PASSED_HEADERS) {
    const value = upstream.headers[name];
    if (typeof value === 'string') headers[name] = value;
  }
  const sse = (headers['content-type'] ?? '').startsWith('text/event-stream');
  res.writeHead(upstream.statusCode, headers);
  if (sse) res.socket?.setNoDelay(true);
  const write = (chunk: Buffer) => writeWithBackpressure(res, chunk);
  try {
    if (head) await write(head);
    for await (const chunk of upstream.body) {
      if (res.destroyed) break;
      await write(chunk as Buffer);
    }
    res.end();
    return false;
  } catch (err) {
    if (res.destroyed) return false; // the client left; the upstream was aborted with it
    if (sse) {
      const error = new StrataError(
        'STRATA_UPSTREAM_ERROR',
        `backend ${backend} failed mid-stream: ${(err as Error).message}`,
      );
      res.end(`\n\ndata: ${JSON.stringify({ type: 'error', error: error.toBody().error })}\n\n`);
    } else {
      res.destroy();
    }
    return true;
  }
}
