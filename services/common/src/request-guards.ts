// What the service base does against hostile input, on every service and in every plugin scope:
// JSON bodies are checked for UTF-8 and nesting depth before they are parsed, and for lone
// surrogates after; header values must be UTF-8; the HTTP server closes connections whose
// request arrives too slowly.
import { isUtf8 } from 'node:buffer';
import { type Server, type ServerResponse, STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import type { HttpLimits } from './config.js';
import { StrataError } from './errors.js';

/**
 * Offset of the first byte that does not start or continue a well-formed UTF-8 sequence
 * (overlong forms, surrogates and code points above U+10FFFF included), or -1 when all are.
 */
export function invalidUtf8Offset(bytes: Uint8Array): number {
  // The native check first: the walk below runs only for bytes already known to be bad.
  if (isUtf8(bytes)) return -1;
  const n = bytes.length;
  let i = 0;
  while (i < n) {
    const b = bytes[i] as number;
    if (b < 0x80) {
      i++;
      continue;
    }
    let continuation: number;
    let low = 0x80;
    let high = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) continuation = 1;
    else if (b >= 0xe0 && b <= 0xef) {
      continuation = 2;
      if (b === 0xe0)
        low = 0xa0; // overlong
      else if (b === 0xed) high = 0x9f; // U+D800-DFFF
    } else if (b >= 0xf0 && b <= 0xf4) {
      continuation = 3;
      if (b === 0xf0)
        low = 0x90; // overlong
      else if (b === 0xf4) high = 0x8f; // above U+10FFFF
    } else return i;
    for (let k = 1; k <= continuation; k++) {
      const c = bytes[i + k];
      if (c === undefined || c < (k === 1 ? low : 0x80) || c > (k === 1 ? high : 0xbf)) return i;
    }
    i += continuation + 1;
  }
  return n;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACE = 0x7d;
const CLOSE_BRACKET = 0x5d;

/**
 * Tracks the nesting depth of JSON text fed in chunks, skipping strings. Exact for valid JSON;
 * invalid JSON is refused by the parse that follows anyway. About 1 ns a byte (the bench in
 * bench/body-guards.mjs); a native search for the end of long strings was tried and lost on
 * text with escapes.
 */
export class JsonDepthScanner {
  private depth = 0;
  private inString = false;
  private escaped = false;

  constructor(readonly limit: number) {}

  /** Offset in `bytes` of the `{` or `[` that opens level limit + 1, or -1. */
  push(bytes: Uint8Array): number {
    const n = bytes.length;
    const limit = this.limit;
    let depth = this.depth;
    let inString = this.inString;
    let i = 0;
    if (this.escaped) {
      this.escaped = false;
      i = 1;
    }
    if (inString) {
      for (; i < n; i++) {
        const d = bytes[i];
        if (d === BACKSLASH) i++;
        else if (d === QUOTE) break;
      }
      if (i < n) {
        inString = false;
        i++;
      }
    }
    for (; i < n; i++) {
      const c = bytes[i];
      if (c === QUOTE) {
        for (i++; i < n; i++) {
          const d = bytes[i];
          if (d === BACKSLASH) i++;
          else if (d === QUOTE) break;
        }
        if (i >= n) {
          inString = true;
          break;
        }
      } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
        if (++depth > limit) return i;
      } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) depth--;
    }
    // A backslash as the last byte escapes the first byte of the next chunk.
    if (i > n) this.escaped = true;
    this.depth = depth;
    this.inString = inString;
    return -1;
  }
}

/** Offset of the `{` or `[` that opens nesting level limit + 1 of JSON text, or -1. */
export function jsonDepthExceededAt(bytes: Uint8Array, limit: number): number {
  return new JsonDepthScanner(limit).push(bytes);
}

const EMPTY = Buffer.alloc(0);

/** Checks UTF-8 fed in chunks; a sequence split across chunks is carried to the next one. */
export class Utf8Scanner {
  private carry: Buffer = EMPTY;
  private offset = 0;
  /** The byte at the offset push or end returned. */
  badByte: number | undefined;

  /** Offset from the start of the body of the first invalid byte in this chunk, or -1. */
  push(chunk: Buffer): number {
    const data = this.carry.length > 0 ? Buffer.concat([this.carry, chunk]) : chunk;
    const start = this.offset - this.carry.length;
    const cut = incompleteTail(data);
    const bad = invalidUtf8Offset(data.subarray(0, cut));
    this.carry = cut === data.length ? EMPTY : Buffer.from(data.subarray(cut));
    this.offset += chunk.length;
    if (bad < 0) return -1;
    this.badByte = data[bad];
    return start + bad;
  }

  /** At the end of the body: a sequence still open there is invalid. */
  end(): number {
    if (this.carry.length === 0) return -1;
    this.badByte = this.carry[0];
    return this.offset - this.carry.length;
  }
}

// Where an unfinished multi-byte sequence begins in the last 3 bytes of `data`, else its length.
function incompleteTail(data: Buffer): number {
  for (let i = data.length - 1; i >= Math.max(0, data.length - 3); i--) {
    const b = data[i] as number;
    if (b >= 0x80 && b < 0xc0) continue;
    const needs = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return data.length - i < needs ? i : data.length;
  }
  return data.length;
}

// A lone surrogate can only come from a \uD800-\uDFFF escape (raw UTF-8 cannot encode one), so
// only bodies holding the text \ud or \uD get their parsed strings checked.
const SURROGATE_ESCAPES = [Buffer.from('\\ud'), Buffer.from('\\uD')];

function hasSurrogateEscape(bytes: Buffer): boolean {
  return SURROGATE_ESCAPES.some((text) => bytes.includes(text));
}

function fieldPath(parent: string, key: string | number): string {
  if (typeof key === 'number') return `${parent}[${key}]`;
  if (!/^[A-Za-z_$][\w$]*$/.test(key)) return `${parent}[${JSON.stringify(key)}]`;
  return parent === '' ? key : `${parent}.${key}`;
}

function illFormedPath(value: unknown, path: string): string | undefined {
  if (typeof value === 'string') return value.isWellFormed() ? undefined : path;
  if (typeof value !== 'object' || value === null) return undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = illFormedPath(value[i], fieldPath(path, i));
      if (found !== undefined) return found;
    }
    return undefined;
  }
  for (const [key, item] of Object.entries(value)) {
    // JSON.stringify writes a lone surrogate as an escape, so the key can be named.
    if (!key.isWellFormed()) return `the key ${JSON.stringify(key)}${path === '' ? '' : ` in ${path}`}`;
    const found = illFormedPath(item, fieldPath(path, key));
    if (found !== undefined) return found;
  }
  return undefined;
}

/**
 * Where a parsed JSON value holds a string or key with a lone UTF-16 surrogate, as a field path
 * such as `messages[0].content`; undefined when there is none. Only what the parse kept is
 * checked: a duplicate key's discarded value does not count.
 */
export function loneSurrogateAt(value: unknown): string | undefined {
  const found = illFormedPath(value, '');
  return found === '' ? 'the body' : found;
}

interface BodyCheck {
  surrogateEscape: boolean;
}

// The result of the byte checks, for the lone-surrogate check after the parse.
const bodyChecks = new WeakMap<FastifyRequest, BodyCheck>();

const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'QUERY']);
const JSON_TYPE = /^\s*application\/json\s*(?:;|$)/i;

/**
 * The body on its way to the content-type parser: passed on as it arrives, checked for UTF-8
 * and nesting depth on the way; a body that fails ends in an error in place of its end, so the
 * parser refuses it (after it was read whole, so that the connection stays usable) without
 * parsing it. Reads its source only once it is read itself: a body Fastify refuses unread (too
 * large) stays unread, for Node to drain after the response.
 */
class JsonBodyGuard extends Readable {
  private readonly utf8 = new Utf8Scanner();
  private readonly depth: JsonDepthScanner;
  private error: StrataError | undefined;
  private offset = 0;
  private tail = EMPTY;
  private started = false;

  constructor(
    private readonly source: Readable,
    limit: number,
    private readonly check: BodyCheck,
  ) {
    super();
    this.depth = new JsonDepthScanner(limit);
  }

  override _read(): void {
    if (this.started) {
      this.source.resume();
      return;
    }
    this.started = true;
    this.source.on('data', (chunk: Buffer) => {
      if (this.error === undefined) this.inspect(chunk);
      this.offset += chunk.length;
      if (!this.push(chunk)) this.source.pause();
    });
    this.source.once('end', () => {
      if (this.error === undefined) {
        const open = this.utf8.end();
        if (open >= 0) this.error = notUtf8(open, this.utf8.badByte);
      }
      if (this.error === undefined) this.push(null);
      else this.destroy(this.error);
    });
    // The client went away mid-body.
    this.source.once('error', (err) => this.destroy(err));
  }

  private inspect(chunk: Buffer): void {
    const bad = this.utf8.push(chunk);
    if (bad >= 0) {
      this.error = notUtf8(bad, this.utf8.badByte);
      return;
    }
    const deep = this.depth.push(chunk);
    if (deep >= 0) {
      this.error = new StrataError(
        'STRATA_BODY_TOO_DEEP',
        `The JSON body nests objects and arrays deeper than ${this.depth.limit} levels (byte offset ${this.offset + deep} opens level ${this.depth.limit + 1}).`,
      );
      return;
    }
    if (!this.check.surrogateEscape) {
      // An escape split across chunks: the last 3 bytes of the previous chunk joined to this one.
      const joined = this.tail.length > 0 ? Buffer.concat([this.tail, chunk.subarray(0, 3)]) : undefined;
      this.check.surrogateEscape =
        hasSurrogateEscape(chunk) || (joined !== undefined && hasSurrogateEscape(joined));
      this.tail = Buffer.from(chunk.subarray(Math.max(0, chunk.length - 3)));
    }
  }
}

function notUtf8(offset: number, byte: number | undefined): StrataError {
  const hex = (byte ?? 0).toString(16).padStart(2, '0');
  return new StrataError(
    'STRATA_INVALID_ENCODING',
    `The body is not valid UTF-8: byte offset ${offset} (0x${hex}) does not start or continue a valid sequence.`,
  );
}

/**
 * Hooks that check every JSON body, whichever content-type parser a scope uses: UTF-8 and
 * nesting depth (app.httpLimits.maxJsonDepth) as the bytes arrive, before the parse (deep
 * nesting overflows the stack of recursive walks after it: validation, serialization); lone
 * surrogates in the parsed strings, after it.
 */
export function guardJsonBodies(app: FastifyInstance): void {
  // Callback hooks: a few microseconds less per request than async ones.
  app.addHook('preParsing', (request, _reply, payload, done) => {
    if (
      !BODY_METHODS.has(request.method) ||
      !JSON_TYPE.test(request.headers['content-type'] ?? '') ||
      // Refused unread by Fastify: left to be drained (service.ts keepConnectionToDrain).
      Number(request.headers['content-length']) > request.routeOptions.bodyLimit
    ) {
      done(null, payload);
      return;
    }
    const check: BodyCheck = { surrogateEscape: false };
    bodyChecks.set(request, check);
    done(null, new JsonBodyGuard(payload, app.httpLimits.maxJsonDepth, check));
  });
  app.addHook('preValidation', (request, _reply, done) => {
    const where = bodyChecks.get(request)?.surrogateEscape ? loneSurrogateAt(request.body) : undefined;
    if (where === undefined) {
      done();
      return;
    }
    done(
      new StrataError(
        'STRATA_INVALID_ENCODING',
        `The JSON string at ${where} holds a lone UTF-16 surrogate (an unpaired \\uD800-\\uDFFF escape), which is not valid Unicode.`,
      ),
    );
  });
}

// Node decodes header bytes one to a char (latin1): a char above 0x7F is a byte above 0x7F.
const NON_ASCII = /[\u0080-\uffff]/;

/** The first header whose value is not valid UTF-8, and the byte offset within that value. */
export function invalidHeaderBytes(
  rawHeaders: readonly string[],
): { name: string; offset: number } | undefined {
  for (let i = 1; i < rawHeaders.length; i += 2) {
    const value = rawHeaders[i] as string;
    if (!NON_ASCII.test(value)) continue;
    const offset = invalidUtf8Offset(Buffer.from(value, 'latin1'));
    if (offset >= 0) return { name: (rawHeaders[i - 1] as string).toLowerCase(), offset };
  }
  return undefined;
}

/** onRequest hook: a header value that is not UTF-8 gets 400 STRATA_INVALID_ENCODING naming it. */
export function rejectInvalidHeaderBytes(
  request: FastifyRequest,
  _reply: FastifyReply,
  done: (err?: Error) => void,
): void {
  const bad = invalidHeaderBytes(request.raw.rawHeaders);
  if (bad === undefined) {
    done();
    return;
  }
  done(
    new StrataError(
      'STRATA_INVALID_ENCODING',
      `The value of header ${bad.name} is not valid UTF-8 (byte offset ${bad.offset} of the value).`,
    ),
  );
}

/**
 * How often Node looks for requests past their headers or request timeout. Node's default is
 * 30 s, which would let a 10 s timeout run to 40 s; a tenth of the shorter timeout keeps the
 * overrun within 10% (at most 1 s, at least 50 ms).
 */
export function connectionsCheckingIntervalMs(limits: HttpLimits): number {
  const shorter = Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs);
  return Math.max(50, Math.min(1000, Math.floor(shorter / 10)));
}

/**
 * Sets app.httpLimits and the server's timeouts. Must run before listen: Node reads the
 * connection-checking interval once, when the server starts listening.
 */
export function applyHttpLimits(app: FastifyInstance, limits: HttpLimits): void {
  const server = app.server as Server & { connectionsCheckingInterval: number };
  if (server.listening) throw new Error('applyHttpLimits must be called before the app listens');
  Object.assign(app.httpLimits, limits);
  server.headersTimeout = limits.headersTimeoutMs;
  server.requestTimeout = limits.requestTimeoutMs;
  server.keepAliveTimeout = limits.keepAliveTimeoutMs;
  server.connectionsCheckingInterval = connectionsCheckingIntervalMs(limits);
}

/**
 * Fastify's clientErrorHandler: errors Node raises before a request reaches Fastify (headers or
 * request timeout, oversized headers, unparsable HTTP) answered with a catalogue body, then the
 * connection closed.
 */
export function answerClientError(logger: Logger, limits: () => HttpLimits) {
  return (err: NodeJS.ErrnoException, socket: Socket): void => {
    if (err.code === 'ECONNRESET' || socket.destroyed) return;
    let error: StrataError;
    if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
      const { headersTimeoutMs, requestTimeoutMs } = limits();
      error = new StrataError(
        'STRATA_REQUEST_TIMEOUT',
        `The request was not received in time: headers are due within ${headersTimeoutMs} ms and the whole request within ${requestTimeoutMs} ms.`,
      );
    } else if (err.code === 'HPE_HEADER_OVERFLOW') {
      error = new StrataError('STRATA_HEADERS_TOO_LARGE');
    } else {
      error = new StrataError('STRATA_INVALID_REQUEST', 'The request is not valid HTTP/1.1.');
    }
    logger.info({ code: error.code, err: err.message, remote: socket.remoteAddress }, 'connection rejected');
    // As Node itself does: answer only when no response has started on this connection.
    const inFlight = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
    if (socket.writable && !inFlight?.headersSent) {
      const body = JSON.stringify(error.toBody());
      socket.write(
        `HTTP/1.1 ${error.statusCode} ${STATUS_CODES[error.statusCode]}\r\nContent-Type: application/json\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
    }
    socket.destroy();
  };
}
