// The attempt loop of one request: forwards it through the picked candidates in order
// (proxy/forward.ts) and reports which backend answered, every attempt, and the error when none
// did. The body goes out as the client sent it; the upstream request is aborted when the client
// goes away.
import { HEADERS, propagationHeaders } from '@strata/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { type Attempt, type Candidate, forward, type RetryBudget } from '../proxy/forward.js';

/** Aborts when the client closes the connection before the response has been written. */
export function abortOnClientClose(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  reply.raw.on('close', () => {
    if (!reply.raw.writableFinished) controller.abort();
  });
  return controller.signal;
}

export interface AttemptTarget {
  path: string;
  /** The rule's name, sent back as x-strata-route. */
  route: string;
  /** The body's bytes as the client sent them; undefined when it sent none. */
  body: Buffer | undefined;
  candidates: readonly Candidate[];
  budget: RetryBudget;
}

export interface AttemptHooks {
  /** A candidate failed before its first byte (connection error, 5xx, broken body). */
  failed(backend: string): void;
  /** A candidate's first byte is in hand: it answers the client. */
  answered(backend: string, firstByteSeconds: number): void;
}

export interface AttemptOutcome {
  /** The backend that answered the client; undefined when none did. */
  backend: string | undefined;
  attempts: Attempt[];
  /** The response had started when the backend failed mid-body. */
  failedAfterFirstByte: boolean;
  /** Why no candidate answered (a StrataError for the error handler); undefined otherwise. */
  error?: Error;
}

export async function tryCandidates(
  request: FastifyRequest,
  reply: FastifyReply,
  target: AttemptTarget,
  hooks: AttemptHooks,
): Promise<AttemptOutcome> {
  const post = request.method === 'POST';
  const headers: Record<string, string> = {
    ...propagationHeaders(request.headers),
    [HEADERS.requestId]: request.id,
  };
  if (post) headers['content-type'] = 'application/json';
  const started = Date.now();
  let answered: string | undefined;
  try {
    const result = await forward(
      {
        method: post ? 'POST' : 'GET',
        path: target.path,
        headers,
        ...(post && target.body !== undefined ? { body: target.body } : {}),
        signal: abortOnClientClose(reply),
        route: target.route,
      },
      target.candidates,
      target.budget,
      reply,
      hooks.failed,
      (backend) => {
        answered = backend;
        hooks.answered(backend, (Date.now() - started) / 1e3);
      },
    );
    return {
      backend: answered,
      attempts: result.attempts,
      failedAfterFirstByte: result.failedAfterFirstByte,
    };
  } catch (err) {
    const attempts = (err as { details?: { attempts?: Attempt[] } }).details?.attempts ?? [];
    return { backend: answered, attempts, failedAfterFirstByte: false, error: err as Error };
  }
}
