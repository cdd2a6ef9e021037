// Headers carried through every hop (docs/architecture.md, Wire contracts) and W3C
// trace-context helpers.
import { randomFillSync, randomUUID } from 'node:crypto';

export const HEADERS = {
  requestId: 'x-request-id',
  traceparent: 'traceparent',
  tracestate: 'tracestate',
  tenant: 'x-strata-tenant',
  sessionId: 'x-session-id',
  priority: 'x-strata-priority',
  /** The edge's signed statement of tenant, tier and granted priority (identity.ts). */
  identity: 'x-strata-identity',
  backend: 'x-strata-backend',
  route: 'x-strata-route',
} as const;

/** Headers only the platform may set: the edge strips them from client requests. */
export const INTERNAL_HEADERS: readonly string[] = [
  HEADERS.tenant,
  HEADERS.identity,
  HEADERS.backend,
  HEADERS.route,
];

/** Headers forwarded hop to hop (edge → router → backend). */
export const PROPAGATED_HEADERS: readonly string[] = [
  HEADERS.requestId,
  HEADERS.traceparent,
  HEADERS.tracestate,
  HEADERS.tenant,
  HEADERS.sessionId,
  HEADERS.priority,
  HEADERS.identity,
];

// Client-chosen request ids are kept when they are short and plain, so they can be logged safely.
const REQUEST_ID_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;

export function isValidRequestId(value: unknown): value is string {
  return typeof value === 'string' && REQUEST_ID_PATTERN.test(value);
}

type HeaderValue = string | string[] | undefined;

function single(value: HeaderValue): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

/** The request's id: the client's x-request-id when valid, otherwise a fresh UUID. */
export function requestIdFrom(headers: Record<string, HeaderValue>): string {
  const given = single(headers[HEADERS.requestId]);
  return isValidRequestId(given) ? given : randomUUID();
}

export interface TraceParent {
  version: string;
  traceId: string; // 32 lowercase hex, not all zero
  parentId: string; // 16 lowercase hex, not all zero
  flags: string; // 2 hex; bit 0 = sampled
}

const TRACEPARENT_PATTERN = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

export function parseTraceparent(value: unknown): TraceParent | undefined {
  if (typeof value !== 'string') return undefined;
  const m = TRACEPARENT_PATTERN.exec(value.trim());
  if (!m) return undefined;
  const [, version, traceId, parentId, flags] = m as unknown as [string, string, string, string, string];
  if (version === 'ff' || /^0+$/.test(traceId) || /^0+$/.test(parentId)) return undefined;
  return { version, traceId, parentId, flags };
}

export function formatTraceparent(tp: TraceParent): string {
  return `${tp.version}-${tp.traceId}-${tp.parentId}-${tp.flags}`;
}

// Random bytes for trace and span ids, drawn from the CSPRNG a few KiB at a time: one
// randomBytes(16) per id costs about 3 µs (a native call for 16 bytes), a pooled id about 0.1 µs.
const ID_POOL_BYTES = 4096;
const idPool = Buffer.alloc(ID_POOL_BYTES);
let idPoolOffset = ID_POOL_BYTES;

function randomHex(bytes: number): string {
  for (;;) {
    if (idPoolOffset + bytes > ID_POOL_BYTES) {
      randomFillSync(idPool);
      idPoolOffset = 0;
    }
    const start = idPoolOffset;
    idPoolOffset += bytes;
    // All zeros is not a valid id (W3C trace context); 2^-64 at worst, but never sent.
    for (let i = start; i < idPoolOffset; i++)
      if (idPool[i] !== 0) return idPool.toString('hex', start, idPoolOffset);
  }
}

/** A new W3C trace id: 32 lowercase hex digits, not all zero. */
export function newTraceId(): string {
  return randomHex(16);
}

/** A new W3C span (parent) id: 16 lowercase hex digits, not all zero. */
export function newSpanId(): string {
  return randomHex(8);
}

/**
 * A child of the incoming trace context (same trace, new span id), or a new sampled trace
 * (with `traceId` when given: the id the request's logs already carry).
 */
export function childTraceparent(incoming: unknown, traceId?: string): TraceParent {
  const parent = parseTraceparent(incoming);
  return {
    version: '00',
    traceId: parent?.traceId ?? traceId ?? newTraceId(),
    parentId: newSpanId(),
    flags: parent?.flags ?? '01',
  };
}

export function stripInternalHeaders<T extends Record<string, HeaderValue>>(headers: T): T {
  const out = { ...headers };
  for (const name of INTERNAL_HEADERS) delete out[name];
  return out;
}

/** The subset of incoming headers that the next hop must receive. */
export function propagationHeaders(headers: Record<string, HeaderValue>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of PROPAGATED_HEADERS) {
    const value = single(headers[name]);
    if (value !== undefined) out[name] = value;
  }
  return out;
}
