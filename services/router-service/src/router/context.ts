// What the router reads from a request: the fields its rules match on, the prompt text that
// prefix affinity hashes, and the session id. The body is read, never validated (the edge does).
// Tenant and priority come from the verified identity only: plain headers and the body's
// priority could come from anyone inside the cluster.
import { HEADERS, type RequestIdentity, requestIdentity } from '@strata/common';
import type { FastifyRequest } from 'fastify';
import type { RouteRequest } from '../routing/index.js';

export interface RequestContext {
  /** What the rules match on. */
  match: RouteRequest;
  /** The prompt, or the chat messages' contents: sized by rules, hashed for prefix affinity. */
  promptText: string;
  /** x-session-id, for session affinity. */
  session: string | undefined;
  /** Who the request is, as verified (or "unverified"). */
  identity: RequestIdentity;
}

interface Body {
  model?: unknown;
  prompt?: unknown;
  messages?: unknown;
}

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

export function requestContext(request: FastifyRequest): RequestContext {
  const body = (
    request.method === 'POST' && request.body && typeof request.body === 'object' ? request.body : {}
  ) as Body;
  const text = promptText(body);
  const identity = requestIdentity(request);
  return {
    match: {
      ...(typeof body.model === 'string' ? { model: body.model } : {}),
      tenant: identity.tenant,
      headers: request.headers,
      priority: identity.priority,
      promptChars: text.length,
    },
    promptText: text,
    session: header(request, HEADERS.sessionId),
    identity,
  };
}
