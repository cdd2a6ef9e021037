// Hostile request bodies for the guards of the service base (request-guards.ts), built around a
// body the service under test accepts, so that each case differs from an accepted request only
// in what it tests. Every service fuzzes its own endpoints with them: none may answer 5xx.
import type { ServerResponse } from 'node:http';
import { connect } from 'node:net';
import type { ErrorCode } from '../errors.js';
import { invalidUtf8Offset, jsonDepthExceededAt, loneSurrogateAt } from '../request-guards.js';
import { randomInt, seededRandom } from './random.js';

export interface HostileBody {
  name: string;
  body: Buffer;
  /** The catalogue code the answer must carry. */
  code?: ErrorCode;
  /** Text the error message must contain (the limit, the byte offset, the field). */
  message?: string;
  /** Must get past the guards: answered exactly as the unmodified base body is. */
  sameAsBase?: boolean;
  /** Must get past the guards: any answer below 500 but not one of the guard codes. */
  passesGuards?: boolean;
}

export interface HostileBodyOptions {
  /** A body the endpoint accepts. */
  base: Record<string, unknown>;
  /** Path to a non-empty ASCII string in base where bad bytes and escapes go, e.g. ['prompt']. */
  textPath: readonly (string | number)[];
  /** The service's httpLimits.maxJsonDepth. */
  maxJsonDepth: number;
  /** The service's body limit: generated bodies stay below half of it. */
  bodyLimit: number;
  /** Seeded random cases on top of the fixed ones (default 200). */
  randomCases?: number;
  seed?: number;
}

export const GUARD_CODES: readonly ErrorCode[] = ['STRATA_BODY_TOO_DEEP', 'STRATA_INVALID_ENCODING'];

type Kind = 'array' | 'object' | 'mixed';

/** `depth` levels of arrays, objects or both in turn, around `leaf`. */
export function nestedJson(kind: Kind, depth: number, leaf = '1'): string {
  const open: string[] = [];
  const close: string[] = [];
  for (let level = 0; level < depth; level++) {
    const array = kind === 'array' || (kind === 'mixed' && level % 2 === 0);
    open.push(array ? '[' : '{"a":');
    close.push(array ? ']' : '}');
  }
  return open.join('') + leaf + close.reverse().join('');
}

/** Nesting depth of a parsed JSON value (a scalar is 0, `[]` is 1). */
export function jsonDepth(value: unknown): number {
  if (typeof value !== 'object' || value === null) return 0;
  let deepest = 0;
  for (const item of Object.values(value)) deepest = Math.max(deepest, jsonDepth(item));
  return deepest + 1;
}

// Invalid UTF-8 and its valid controls.
const BAD_SEQUENCES: readonly [string, number[]][] = [
  ['0xFF', [0xff]],
  ['a lone continuation byte', [0x80]],
  ['an overlong "/"', [0xc0, 0xaf]],
  ['an overlong 3-byte form', [0xe0, 0x80, 0xaf]],
  ['a UTF-8-encoded surrogate', [0xed, 0xa0, 0x80]],
  ['a truncated 3-byte sequence', [0xe2, 0x82]],
  ['a code point above U+10FFFF', [0xf4, 0x90, 0x80, 0x80]],
  ['0xC3 then ASCII', [0xc3, 0x28]],
];
const GOOD_SEQUENCES: readonly [string, number[]][] = [
  ['é', [0xc3, 0xa9]],
  ['€', [0xe2, 0x82, 0xac]],
  ['😀', [0xf0, 0x9f, 0x98, 0x80]],
  ['U+10FFFF', [0xf4, 0x8f, 0xbf, 0xbf]],
];
// Text inserted as is into a JSON string.
const BAD_ESCAPES = ['\\ud800', '\\udfff', '\\uDBFF', '\\udc00x', '\\ude00\\ud83d'];
const GOOD_ESCAPES = ['\\ud83d\\ude00', '\\\\ud800', '\\u00e9', '\\uD83D\\uDE00'];

const HOLE = '@@HOLE@@';

function setAt(target: unknown, path: readonly (string | number)[], value: unknown): void {
  let node = target as Record<string | number, unknown>;
  for (const key of path.slice(0, -1)) node = node[key] as Record<string | number, unknown>;
  node[path[path.length - 1] as string | number] = value;
}

function getAt(target: unknown, path: readonly (string | number)[]): unknown {
  let node = target as Record<string | number, unknown>;
  for (const key of path) node = node[key] as Record<string | number, unknown>;
  return node;
}

export function hostileBodies(options: HostileBodyOptions): HostileBody[] {
  const { base, textPath, maxJsonDepth: limit } = options;
  const rand = seededRandom(options.seed ?? 23);
  const text = getAt(base, textPath);
  if (typeof text !== 'string' || !/^[\x20-\x7e]+$/.test(text)) {
    throw new Error('textPath must name a non-empty printable ASCII string');
  }
  const baseDepth = jsonDepth(base);
  if (baseDepth >= limit) throw new Error(`the base body already nests ${baseDepth} levels`);
  const budget = Math.floor(options.bodyLimit / 2);

  // The base body split around a point inside the string at textPath.
  const splitText = (at: number): [Buffer, Buffer] => {
    const copy = structuredClone(base);
    setAt(copy, textPath, text.slice(0, at) + HOLE + text.slice(at));
    const [before, after] = JSON.stringify(copy).split(HOLE) as [string, string];
    return [Buffer.from(before), Buffer.from(after)];
  };
  // The base body with raw JSON text in place of the value of `key` (added when absent).
  const withRaw = (key: string, raw: string): Buffer =>
    Buffer.from(JSON.stringify({ ...base, [key]: HOLE }).replace(`"${HOLE}"`, raw));

  const cases: HostileBody[] = [];
  const deep = (name: string, kind: Kind, levels: number, where: 'unknown' | 'text' | 'root') => {
    if (levels < 1) return;
    const raw = nestedJson(kind, levels);
    let body: Buffer;
    let total: number;
    if (where === 'root') {
      body = Buffer.from(raw);
      total = levels;
    } else if (where === 'unknown') {
      body = withRaw('x_unknown', raw);
      total = Math.max(baseDepth, levels + 1);
    } else {
      const copy = structuredClone(base);
      setAt(copy, textPath, HOLE);
      body = Buffer.from(JSON.stringify(copy).replace(`"${HOLE}"`, raw));
      total = Math.max(baseDepth, levels + textPath.length);
    }
    if (body.length > budget) return;
    cases.push(
      total > limit
        ? { name, body, code: 'STRATA_BODY_TOO_DEEP', message: `deeper than ${limit} levels` }
        : { name, body, passesGuards: true },
    );
  };

  // Depth: just under, at and past the limit, in an unknown field, a known one and at the root.
  for (const kind of ['array', 'object', 'mixed'] as const) {
    for (const where of ['unknown', 'text', 'root'] as const) {
      const offset = where === 'root' ? 0 : where === 'unknown' ? 1 : textPath.length;
      for (const total of [limit - 1, limit, limit + 1, limit + 2]) {
        deep(`${kind} nesting, ${total} levels in all (${where})`, kind, total - offset, where);
      }
    }
    deep(`${kind} nesting, 5000 levels (unknown field)`, kind, 5000, 'unknown');
    const most = Math.min(100_000, Math.floor((budget - 16) / (kind === 'array' ? 2 : 6)));
    deep(`${kind} nesting, ${most} levels (root)`, kind, most, 'root');
  }
  // Deep and never closed; deep brackets inside a string (text, not nesting).
  const unclosed = Buffer.from(`{"x":${'['.repeat(Math.min(50_000, budget - 10))}`);
  cases.push({
    name: 'unclosed brackets',
    body: unclosed,
    code: 'STRATA_BODY_TOO_DEEP',
    message: `deeper than ${limit} levels`,
  });
  cases.push({
    name: 'brackets inside a string',
    body: Buffer.from(JSON.stringify({ ...base, x_unknown: '[{'.repeat(5000) })),
    passesGuards: true,
  });
  // Wide and long: huge arrays, long strings, many keys.
  const wide = Math.min(100_000, Math.floor(budget / 3));
  cases.push({
    name: `array of ${wide} numbers`,
    body: withRaw('x_unknown', `[${'0,'.repeat(wide - 1)}0]`),
    passesGuards: true,
  });
  cases.push({
    name: `array of ${Math.floor(wide / 4)} empty arrays`,
    body: withRaw('x_unknown', `[${'[],'.repeat(Math.floor(wide / 4) - 1)}[]]`),
    passesGuards: true,
  });
  const long = Math.min(512 * 1024, budget - 1024);
  cases.push({
    name: `a ${long}-byte string (unknown field)`,
    body: withRaw('x_unknown', JSON.stringify('y'.repeat(long))),
    passesGuards: true,
  });
  {
    const copy = structuredClone(base);
    setAt(copy, textPath, `${text} ${'lorem ipsum '.repeat(Math.floor(long / 12))}`);
    cases.push({
      name: `a ${long}-byte string (text field)`,
      body: Buffer.from(JSON.stringify(copy)),
      passesGuards: true,
    });
  }
  const keys = Math.min(20_000, Math.floor(budget / 16));
  cases.push({
    name: `an object of ${keys} keys`,
    body: withRaw(
      'x_unknown',
      JSON.stringify(Object.fromEntries(Array.from({ length: keys }, (_, i) => [`k${i}`, i]))),
    ),
    passesGuards: true,
  });
  cases.push({
    name: `${keys} top-level keys`,
    body: Buffer.from(
      JSON.stringify({
        ...Object.fromEntries(Array.from({ length: keys }, (_, i) => [`k${i}`, i])),
        ...base,
      }),
    ),
    passesGuards: true,
  });

  // UTF-8: the base body with bytes inserted in its text; the valid ones must change nothing.
  const insert = (name: string, bytes: number[], at: number, bad: boolean) => {
    const [before, after] = splitText(at);
    const body = Buffer.concat([before, Buffer.from(bytes), after]);
    cases.push(
      bad
        ? { name, body, code: 'STRATA_INVALID_ENCODING', message: `byte offset ${before.length}` }
        : { name, body, sameAsBase: true },
    );
  };
  const withEscape = (name: string, escapeText: string, bad: boolean) => {
    const [before, after] = splitText(Math.floor(text.length / 2));
    const body = Buffer.concat([before, Buffer.from(escapeText), after]);
    cases.push(
      bad
        ? { name, body, code: 'STRATA_INVALID_ENCODING', message: 'lone UTF-16 surrogate' }
        : { name, body, sameAsBase: true },
    );
  };
  for (const [label, bytes] of BAD_SEQUENCES) insert(`invalid UTF-8: ${label}`, bytes, 1, true);
  for (const [label, bytes] of GOOD_SEQUENCES) insert(`valid UTF-8: ${label}`, bytes, 1, false);
  insert('invalid UTF-8 at the end of the text', [0xe2, 0x82], text.length, true);
  for (const e of BAD_ESCAPES) withEscape(`lone surrogate escape ${e}`, e, true);
  for (const e of GOOD_ESCAPES) withEscape(`well-formed escape ${e}`, e, false);
  // A key with a lone surrogate; a duplicate key whose lone-surrogate value the parse discards.
  const [firstKey] = Object.keys(base) as [string];
  cases.push({
    name: 'a key with a lone surrogate',
    body: Buffer.from(`{"x\\ud800":1,${JSON.stringify(base).slice(1)}`),
    code: 'STRATA_INVALID_ENCODING',
    message: 'lone UTF-16 surrogate',
  });
  cases.push({
    name: `a lone surrogate in "${firstKey}", overwritten by its duplicate`,
    body: Buffer.from(`{"${firstKey}":"\\ud800",${JSON.stringify(base).slice(1)}`),
    sameAsBase: true,
  });

  // Seeded random mixtures of the above.
  for (let n = 0; n < (options.randomCases ?? 200); n++) {
    const kinds = ['array', 'object', 'mixed'] as const;
    switch (randomInt(rand, 4)) {
      case 0: {
        const levels = 1 + randomInt(rand, 2 * limit);
        const where = (['unknown', 'text', 'root'] as const)[randomInt(rand, 3)] as
          | 'unknown'
          | 'text'
          | 'root';
        deep(`random: ${levels}-level nesting (${where})`, kinds[randomInt(rand, 3)] as Kind, levels, where);
        break;
      }
      case 1: {
        const [label, bytes] = BAD_SEQUENCES[randomInt(rand, BAD_SEQUENCES.length)] as [string, number[]];
        insert(`random: invalid UTF-8 (${label})`, bytes, randomInt(rand, text.length + 1), true);
        break;
      }
      case 2: {
        const [label, bytes] = GOOD_SEQUENCES[randomInt(rand, GOOD_SEQUENCES.length)] as [string, number[]];
        insert(`random: valid UTF-8 (${label})`, bytes, randomInt(rand, text.length + 1), false);
        break;
      }
      default: {
        // Deep and invalid UTF-8 at once: the UTF-8 check runs first.
        const raw = Buffer.from(
          nestedJson(kinds[randomInt(rand, 3)] as Kind, limit + 1 + randomInt(rand, 100), '"z"'),
        );
        const bad = BAD_SEQUENCES[randomInt(rand, BAD_SEQUENCES.length)]?.[1] as number[];
        const cut = raw.lastIndexOf('"z"') + 1;
        const body = Buffer.concat([raw.subarray(0, cut), Buffer.from(bad), raw.subarray(cut)]);
        cases.push({
          name: 'random: deep and invalid UTF-8',
          body,
          code: 'STRATA_INVALID_ENCODING',
          message: `byte offset ${cut}`,
        });
      }
    }
  }
  return cases;
}

export interface Answer {
  status: number;
  body: string;
}

export interface FuzzReport {
  cases: number;
  /** Answers counted by status and code, e.g. '400 STRATA_BODY_TOO_DEEP': 61. */
  answers: Record<string, number>;
  /** One line per case whose answer broke its expectation. */
  failures: string[];
}

function codeOf(answer: Answer): string | undefined {
  try {
    return (JSON.parse(answer.body) as { error?: { code?: string } }).error?.code;
  } catch {
    return undefined;
  }
}

/** Sends every case (and the base body first) and checks each answer against its expectation. */
export async function fuzzBodies(
  base: Buffer,
  cases: readonly HostileBody[],
  send: (body: Buffer) => Promise<Answer>,
): Promise<FuzzReport> {
  const baseAnswer = await send(base);
  const answers: Record<string, number> = {};
  const failures: string[] = [];
  for (const c of cases) {
    let answer: Answer;
    try {
      answer = await send(c.body);
    } catch (err) {
      failures.push(`${c.name}: no answer (${(err as Error).message})`);
      continue;
    }
    const code = codeOf(answer);
    const label = `${answer.status}${code ? ` ${code}` : ''}`;
    answers[label] = (answers[label] ?? 0) + 1;
    const problems: string[] = [];
    if (answer.status >= 500) problems.push('a 5xx');
    if (c.code !== undefined && (answer.status !== 400 || code !== c.code))
      problems.push(`not 400 ${c.code}`);
    if (c.message !== undefined && !answer.body.includes(c.message))
      problems.push(`message without "${c.message}"`);
    if (c.sameAsBase && answer.status !== baseAnswer.status)
      problems.push(`not ${baseAnswer.status} as the base body`);
    if ((c.sameAsBase || c.passesGuards) && code !== undefined && GUARD_CODES.includes(code as ErrorCode)) {
      problems.push('stopped by a guard');
    }
    if (problems.length > 0)
      failures.push(`${c.name}: ${label} (${problems.join(', ')}): ${answer.body.slice(0, 200)}`);
  }
  return { cases: cases.length, answers, failures };
}

export interface TrickleResult {
  /** What the server sent back. */
  received: string;
  /** When the server closed the connection, in ms after connecting; undefined if it never did. */
  closedAfterMs: number | undefined;
  bytesSent: number;
}

/**
 * A slow client: connects to 127.0.0.1:port, sends `prefix`, then `data` one byte every
 * `intervalMs`, then stays silent, until the server closes the connection or `giveUpMs` passes.
 */
export async function trickle(
  port: number,
  data: string | Buffer,
  options: {
    intervalMs: number;
    giveUpMs: number /** Sent at once on connecting. */;
    prefix?: string | Buffer;
  },
): Promise<TrickleResult> {
  const bytes = Buffer.from(data);
  const socket = connect(port, '127.0.0.1');
  const started = performance.now();
  if (options.prefix !== undefined) socket.write(options.prefix);
  let received = '';
  let sent = 0;
  socket.setEncoding('utf8').on('data', (chunk: string) => {
    received += chunk;
  });
  // Writing after the server closed fails (EPIPE); the close that follows ends the wait.
  socket.on('error', () => {});
  const writer = setInterval(() => {
    if (sent < bytes.length && socket.writable) socket.write(bytes.subarray(sent, ++sent));
  }, options.intervalMs);
  const closedAfterMs = await new Promise<number | undefined>((resolve) => {
    const giveUp = setTimeout(() => resolve(undefined), options.giveUpMs);
    socket.once('close', () => {
      clearTimeout(giveUp);
      resolve(performance.now() - started);
    });
  });
  clearInterval(writer);
  socket.destroy();
  return { received, closedAfterMs, bytesSent: sent };
}

/** POSTs `body` as JSON to `url` (with `headers` besides the content type) and reads the answer. */
export async function postBody(
  url: string,
  body: Buffer | string,
  headers: Record<string, string> = {},
): Promise<Answer> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body,
  });
  return { status: res.status, body: await res.text() };
}

/**
 * Fuzzes one endpoint: the hostile bodies around `options.base`, each sent by `send` after the
 * base body itself, logged under `label`. `problems` holds the report's failures and a line for
 * each guard that answered `minimumPerGuard` cases or fewer: [] when the guards did their work.
 */
export async function fuzzGuards(
  label: string,
  options: HostileBodyOptions,
  send: (body: Buffer) => Promise<Answer>,
  minimumPerGuard = 20,
): Promise<FuzzReport & { problems: string[] }> {
  const report = await fuzzBodies(Buffer.from(JSON.stringify(options.base)), hostileBodies(options), send);
  console.log(`${label}: ${report.cases} cases`, report.answers);
  const problems = [...report.failures];
  for (const code of GUARD_CODES) {
    const count = report.answers[`400 ${code}`] ?? 0;
    if (count <= minimumPerGuard)
      problems.push(`400 ${code} answered ${count} times, not more than ${minimumPerGuard}`);
  }
  return { ...report, problems };
}

/** What the guards should have stopped in a body that got past them; [] when nothing. */
export function unguardedBodyProblems(body: string | Buffer, maxJsonDepth: number): string[] {
  const bytes = Buffer.from(body);
  const problems: string[] = [];
  const invalidAt = invalidUtf8Offset(bytes);
  if (invalidAt !== -1) problems.push(`invalid UTF-8 at byte ${invalidAt}`);
  const deepAt = jsonDepthExceededAt(bytes, maxJsonDepth);
  if (deepAt !== -1) problems.push(`nested deeper than ${maxJsonDepth} levels at byte ${deepAt}`);
  if (invalidAt === -1 && deepAt === -1) {
    const surrogate = loneSurrogateAt(JSON.parse(bytes.toString('utf8')));
    if (surrogate !== undefined) problems.push(`a lone surrogate at ${surrogate}`);
  }
  return problems.map((p) => `${p}: ${bytes.subarray(0, 80).toString('utf8')}`);
}

/** Short HTTP timeouts for slow-client tests, so that a slow client is cut soon. */
export const SLOW_CLIENT_TIMEOUTS = { headersTimeoutMs: 300, requestTimeoutMs: 600 };
/** SLOW_CLIENT_TIMEOUTS as a service's environment. */
export const SLOW_CLIENT_TIMEOUT_ENV = {
  STRATA_HTTP_HEADERS_TIMEOUT_MS: String(SLOW_CLIENT_TIMEOUTS.headersTimeoutMs),
  STRATA_HTTP_REQUEST_TIMEOUT_MS: String(SLOW_CLIENT_TIMEOUTS.requestTimeoutMs),
};

export interface SlowClientOptions {
  /** The service: its port on 127.0.0.1, or its URL. */
  target: number | string;
  /** The service's headers and request timeouts (default SLOW_CLIENT_TIMEOUTS). */
  headersTimeoutMs?: number;
  requestTimeoutMs?: number;
  /** How late after its timeout a connection may close (default 400 ms). */
  slackMs?: number;
  /** Request line and headers sent a byte at a time, e.g. 'GET /status HTTP/1.1\r\nHost: x\r\n'. */
  slowHeaders?: string;
  /** A request whose headers arrive at once and whose JSON body then trickles. */
  slowBody?: { requestLine: string; body: string; headers?: Record<string, string> };
}

/**
 * Slow clients, one byte every 50 ms: the one sending its headers must lose its connection with
 * a 408 at the headers timeout, the one sending its body at the request timeout, that 408 with
 * the catalogue's STRATA_REQUEST_TIMEOUT. What went otherwise; [] when both did.
 */
export async function slowClientProblems(options: SlowClientOptions): Promise<string[]> {
  const slack = options.slackMs ?? 400;
  const { headersTimeoutMs, requestTimeoutMs } = { ...SLOW_CLIENT_TIMEOUTS, ...options };
  const port = typeof options.target === 'number' ? options.target : Number(new URL(options.target).port);
  const problems: string[] = [];
  const check = (what: string, result: TrickleResult, timeoutMs: number, code: boolean) => {
    const after = result.closedAfterMs;
    if (after === undefined || after < timeoutMs - 20 || after >= timeoutMs + slack) {
      problems.push(
        `${what}: closed after ${after} ms, not within ${timeoutMs - 20}..${timeoutMs + slack} ms`,
      );
    }
    if (!/^HTTP\/1\.1 408 /.test(result.received)) {
      problems.push(`${what}: answered ${JSON.stringify(result.received.slice(0, 80))}, not 408`);
    }
    if (code && !result.received.includes('"code":"STRATA_REQUEST_TIMEOUT"')) {
      problems.push(`${what}: the answer has no STRATA_REQUEST_TIMEOUT`);
    }
  };
  const pace = { intervalMs: 50, giveUpMs: 5000 };
  if (options.slowHeaders !== undefined) {
    const result = await trickle(port, options.slowHeaders, pace);
    check('slow headers', result, headersTimeoutMs, false);
  }
  if (options.slowBody !== undefined) {
    const { requestLine, body, headers = {} } = options.slowBody;
    const extra = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`);
    const prefix =
      `${requestLine}\r\nHost: x\r\n${extra.join('')}` +
      `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`;
    const result = await trickle(port, body, { ...pace, prefix });
    check('slow body', result, requestTimeoutMs, true);
  }
  return problems;
}

/** Answers `res` with an SSE stream of `tokens` token events `intervalMs` apart, then `done`. */
export function writeSlowTokenStream(
  res: ServerResponse,
  tokens: number,
  done: Record<string, unknown>,
  intervalMs = 100,
): void {
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
  let n = 0;
  const timer = setInterval(() => {
    res.write(`data: ${JSON.stringify({ type: 'token', token: 'a', id: 1, index: n })}\n\n`);
    if (++n === tokens) {
      clearInterval(timer);
      res.end(`data: ${JSON.stringify({ type: 'done', ...done })}\n\n`);
    }
  }, intervalMs);
}

/** What keeps an SSE answer from being a whole stream: 200, `tokens` token events, a done event. */
export function tokenStreamProblems(answer: Answer, tokens: number): string[] {
  const problems: string[] = [];
  if (answer.status !== 200) problems.push(`status ${answer.status}, not 200`);
  const count = answer.body.match(/"type":"token"/g)?.length ?? 0;
  if (count !== tokens) problems.push(`${count} token events, not ${tokens}`);
  if (!answer.body.includes('"type":"done"')) problems.push('no done event');
  return problems;
}
