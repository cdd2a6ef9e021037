// The guards of the service base against hostile input (request-guards.ts): nesting depth and
// UTF-8 of JSON bodies, UTF-8 of header values, and the timeouts on receiving a request.
import { once } from 'node:events';
import { type AddressInfo, connect } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import {
  baseServiceEnv,
  baseServiceSchema,
  type ConfigError,
  DEFAULT_HTTP_LIMITS,
  loadConfig,
} from '../src/config.js';
import { createLogger } from '../src/logger.js';
import { createMetrics } from '../src/metrics.js';
import {
  applyHttpLimits,
  connectionsCheckingIntervalMs,
  invalidHeaderBytes,
  invalidUtf8Offset,
  JsonDepthScanner,
  jsonDepthExceededAt,
  loneSurrogateAt,
  Utf8Scanner,
} from '../src/request-guards.js';
import { createServiceApp, type ServiceAppOptions } from '../src/service.js';
import { fuzzBodies, hostileBodies, jsonDepth, nestedJson, trickle } from '../src/testing/hostile-input.js';
import { randomInt, seededRandom } from '../src/testing/random.js';

const apps: FastifyInstance[] = [];
afterEach(async () => {
  await Promise.all(apps.splice(0).map((app) => app.close()));
});

function build(http?: ServiceAppOptions['http']) {
  const app = createServiceApp({
    name: 'test-service',
    logger: createLogger({ service: 'test-service', level: 'silent' }),
    metrics: createMetrics('test-service', { defaultMetrics: false }),
    ...(http ? { http } : {}),
  });
  app.post('/echo', async (request) => ({ got: request.body }));
  apps.push(app);
  return app;
}

const JSON_HEADERS = { 'content-type': 'application/json' };

describe('JSON nesting depth', () => {
  it('finds exactly where valid JSON first nests deeper than the limit, strings skipped', () => {
    const rand = seededRandom(7);
    const strings = [
      '[',
      '{',
      ']',
      '"',
      '\\',
      '\\"[',
      'a\\\\',
      '\u00e9[',
      '😀{',
      `${'y'.repeat(45)}"[${'z'.repeat(40)}`,
      `${'\\'.repeat(3)}${'w'.repeat(70)}{`,
    ];
    const value = (depth: number): unknown => {
      const pick = randomInt(rand, depth > 12 ? 3 : 6);
      if (pick === 0) return strings[randomInt(rand, strings.length)];
      if (pick === 1) return randomInt(rand, 100);
      if (pick === 2) return null;
      if (pick === 3) return Array.from({ length: randomInt(rand, 4) }, () => value(depth + 1));
      return Object.fromEntries(
        Array.from({ length: randomInt(rand, 4) }, (_, i) => [strings[i % strings.length], value(depth + 1)]),
      );
    };
    for (let n = 0; n < 500; n++) {
      const v = value(0);
      const bytes = Buffer.from(JSON.stringify(v));
      const depth = jsonDepth(v);
      expect(jsonDepthExceededAt(bytes, depth)).toBe(-1);
      if (depth > 0) {
        const at = jsonDepthExceededAt(bytes, depth - 1);
        expect(at).toBeGreaterThanOrEqual(0);
        expect('[{').toContain(String.fromCharCode(bytes[at] as number));
        // Everything before that bracket nests no deeper than the limit.
        expect(jsonDepthExceededAt(bytes.subarray(0, at), depth - 1)).toBe(-1);
      }
    }
    expect(jsonDepthExceededAt(Buffer.from(nestedJson('mixed', 5000)), 128)).toBe(
      nestedJson('mixed', 128).indexOf('1'),
    );
  });

  it('gives the same answers fed in chunks as in one piece, for depth and UTF-8 alike', () => {
    const rand = seededRandom(5);
    const long = 'L'.repeat(40);
    const pieces = [
      '[',
      ']',
      '{"a":',
      '}',
      '"\\"',
      '"\\\\"',
      '"x\\"y"',
      ',',
      '"é€😀"',
      `"${long}\\"${long}[{"`,
      `"${long}${long}\\\\"`,
      `"${long}`,
      '\\',
      '"',
    ];
    const bad = [Buffer.from([0xff]), Buffer.from([0xe2, 0x82]), Buffer.from([0xed, 0xa0, 0x80])];
    for (let n = 0; n < 2000; n++) {
      const parts: Buffer[] = [];
      for (let k = randomInt(rand, 60); k > 0; k--)
        parts.push(Buffer.from(pieces[randomInt(rand, pieces.length)] as string));
      if (randomInt(rand, 4) === 0)
        parts.splice(randomInt(rand, parts.length + 1), 0, bad[randomInt(rand, 3)] as Buffer);
      const whole = Buffer.concat(parts);
      const limit = 1 + randomInt(rand, 6);
      const depthWhole = jsonDepthExceededAt(whole, limit);
      const utf8Whole = invalidUtf8Offset(whole);
      const depth = new JsonDepthScanner(limit);
      const utf8 = new Utf8Scanner();
      let depthChunked = -1;
      let utf8Chunked = -1;
      for (let at = 0; at < whole.length; ) {
        const size = 1 + randomInt(rand, randomInt(rand, 2) === 0 ? 5 : 200);
        const chunk = whole.subarray(at, at + size);
        const d = depth.push(chunk);
        if (depthChunked < 0 && d >= 0) depthChunked = at + d;
        const u = utf8.push(chunk);
        if (utf8Chunked < 0 && u >= 0) utf8Chunked = u;
        at += size;
      }
      if (utf8Chunked < 0) utf8Chunked = utf8.end();
      expect([whole.toString('hex'), depthChunked, utf8Chunked]).toEqual([
        whole.toString('hex'),
        depthWhole,
        utf8Whole,
      ]);
    }
  });

  it('answers a body nested past the limit 400 STRATA_BODY_TOO_DEEP naming the limit, and one at it as usual', async () => {
    const app = build();
    expect(app.httpLimits.maxJsonDepth).toBe(128);
    const at = await app.inject({
      method: 'POST',
      url: '/echo',
      headers: JSON_HEADERS,
      payload: nestedJson('array', 128),
    });
    expect(at.statusCode).toBe(200);
    expect(jsonDepth(at.json().got)).toBe(128);
    // The case: 5,000 levels (30 KB) in an unknown field.
    const body = `{"prompt":"hi","extra":${nestedJson('mixed', 5000)}}`;
    const res = await app.inject({ method: 'POST', url: '/echo', headers: JSON_HEADERS, payload: body });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual({
      error: {
        code: 'STRATA_BODY_TOO_DEEP',
        type: 'invalid_request',
        message: `The JSON body nests objects and arrays deeper than 128 levels (byte offset ${body.indexOf('[') + nestedJson('mixed', 127).indexOf('1')} opens level 129).`,
      },
    });
  });

  it('takes its limit from the options and from applyHttpLimits', async () => {
    const app = build({ maxJsonDepth: 4 });
    const send = (payload: string) =>
      app.inject({ method: 'POST', url: '/echo', headers: JSON_HEADERS, payload });
    expect((await send('[[[[1]]]]')).statusCode).toBe(200);
    expect((await send('[[[[[1]]]]]')).json().error.message).toContain('deeper than 4 levels');
    applyHttpLimits(app, { ...DEFAULT_HTTP_LIMITS, maxJsonDepth: 5 });
    expect((await send('[[[[[1]]]]]')).statusCode).toBe(200);
  });

  it('fuzz: no hostile body gets a 5xx, each guard answers its own code', async () => {
    for (const maxJsonDepth of [16, 128]) {
      const app = build({ maxJsonDepth });
      const base = {
        prompt: 'Once upon a time there was a fox',
        max_tokens: 4,
        messages: [{ role: 'user', content: 'x' }],
      };
      const cases = hostileBodies({ base, textPath: ['prompt'], maxJsonDepth, bodyLimit: 1024 * 1024 });
      const report = await fuzzBodies(Buffer.from(JSON.stringify(base)), cases, async (body) => {
        const res = await app.inject({ method: 'POST', url: '/echo', headers: JSON_HEADERS, payload: body });
        return { status: res.statusCode, body: res.body };
      });
      console.log(`common /echo, maxJsonDepth ${maxJsonDepth}: ${report.cases} cases`, report.answers);
      expect(report.failures).toEqual([]);
      expect(report.answers['400 STRATA_BODY_TOO_DEEP']).toBeGreaterThan(20);
      expect(report.answers['400 STRATA_INVALID_ENCODING']).toBeGreaterThan(20);
      expect((await app.inject('/health/live')).statusCode).toBe(200);
    }
  });
});

describe('UTF-8', () => {
  it('finds the first byte of an invalid sequence, agreeing with a fatal TextDecoder', () => {
    const decoder = new TextDecoder('utf-8', { fatal: true });
    const rand = seededRandom(11);
    const alphabet = [
      0x41, 0x7f, 0x80, 0xbf, 0xc0, 0xc2, 0xdf, 0xe0, 0xa0, 0xed, 0x9f, 0xef, 0xf0, 0x90, 0xf4, 0x8f, 0xf5,
      0xff,
    ];
    for (let n = 0; n < 5000; n++) {
      const bytes = Uint8Array.from(
        { length: randomInt(rand, 8) },
        () => alphabet[randomInt(rand, alphabet.length)] as number,
      );
      let valid = true;
      try {
        decoder.decode(bytes);
      } catch {
        valid = false;
      }
      const at = invalidUtf8Offset(bytes);
      expect([Buffer.from(bytes).toString('hex'), at === -1]).toEqual([
        Buffer.from(bytes).toString('hex'),
        valid,
      ]);
      if (!valid) {
        // The bytes before it decode; the sequence starting at it does not.
        expect(() => decoder.decode(bytes.subarray(0, at))).not.toThrow();
        expect(invalidUtf8Offset(bytes.subarray(at))).toBe(0);
      }
    }
  });

  it('rejects invalid bytes in a body that is otherwise the same as an accepted one, saying where', async () => {
    const app = build();
    const send = (payload: Buffer) =>
      app.inject({ method: 'POST', url: '/echo', headers: JSON_HEADERS, payload });
    const good = Buffer.from('{"prompt":"caf\u00e9 au lait"}');
    const bad = Buffer.from(good);
    const offset = good.indexOf(0xc3);
    bad[offset + 1] = 0x28; // 0xC3 0x28: a lead byte without its continuation
    expect((await send(good)).json()).toEqual({ got: { prompt: 'caf\u00e9 au lait' } });
    const res = await send(bad);
    expect(res.statusCode).toBe(400);
    expect(res.json().error).toEqual({
      code: 'STRATA_INVALID_ENCODING',
      type: 'invalid_request',
      message: `The body is not valid UTF-8: byte offset ${offset} (0xc3) does not start or continue a valid sequence.`,
    });
  });

  it('rejects a lone surrogate escape where the parse keeps it, naming the field', async () => {
    const app = build();
    const send = (payload: string) =>
      app.inject({ method: 'POST', url: '/echo', headers: JSON_HEADERS, payload });
    const ok = await send('{"messages":[{"content":"a\\ud83d\\ude00b"}],"note":"\\\\ud800"}');
    expect(ok.json()).toEqual({ got: { messages: [{ content: 'a😀b' }], note: '\\ud800' } });
    const res = await send('{"messages":[{"content":"a\\ud83db"}]}');
    expect(res.statusCode).toBe(400);
    expect(res.json().error.code).toBe('STRATA_INVALID_ENCODING');
    expect(res.json().error.message).toBe(
      'The JSON string at messages[0].content holds a lone UTF-16 surrogate (an unpaired \\uD800-\\uDFFF escape), which is not valid Unicode.',
    );
    expect((await send('{"a":{"b\\udc00":1}}')).json().error.message).toContain(
      'at the key "b\\udc00" in a holds',
    );
    expect((await send('"\\ud800"')).json().error.message).toContain('at the body holds');
    // A duplicate key replaces the bad value: what the service gets is well-formed.
    expect((await send('{"a":"\\ud800","a":"fine"}')).json()).toEqual({ got: { a: 'fine' } });
    expect(loneSurrogateAt({ a: ['x', { b: 'y' }] })).toBeUndefined();
    expect(loneSurrogateAt({ a: ['x', { 'b c': 'y\udc00' }] })).toBe('a[1]["b c"]');
  });

  it('rejects a header value that is not UTF-8, naming the header; valid UTF-8 passes', async () => {
    const app = build();
    await app.listen({ host: '127.0.0.1', port: 0 });
    const { port } = app.server.address() as AddressInfo;
    const request = async (headerValue: Buffer) => {
      const socket = connect(port, '127.0.0.1');
      socket.write(
        Buffer.concat([
          Buffer.from(
            'POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nX-Note: ',
          ),
          headerValue,
          Buffer.from('\r\nConnection: close\r\n\r\n{}'),
        ]),
      );
      let text = '';
      socket.setEncoding('utf8').on('data', (chunk) => {
        text += chunk;
      });
      await once(socket, 'close');
      return text;
    };
    expect(await request(Buffer.from('caf\u00e9'))).toMatch(/^HTTP\/1\.1 200 /);
    const answer = await request(Buffer.from([0x63, 0x61, 0x66, 0xc3, 0x28]));
    expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    expect(answer).toMatch(/x-request-id: /);
    expect(answer).toContain(
      '{"error":{"code":"STRATA_INVALID_ENCODING","message":"The value of header x-note is not valid UTF-8 (byte offset 3 of the value).","type":"invalid_request"}}',
    );
    expect(invalidHeaderBytes(['Host', 'x', 'A', 'ok'])).toBeUndefined();
  });
});

describe('timeouts on receiving a request', () => {
  it('are configurable, default to the chart Envoy values, and keep headers within the request timeout', () => {
    const config = loadConfig({ schema: baseServiceSchema, envMap: baseServiceEnv, env: {} });
    expect(config.http).toEqual({
      maxJsonDepth: 128,
      headersTimeoutMs: 10_000,
      requestTimeoutMs: 30_000,
      keepAliveTimeoutMs: 72_000,
    });
    expect(connectionsCheckingIntervalMs(config.http)).toBe(1000);
    const set = loadConfig({
      schema: baseServiceSchema,
      envMap: baseServiceEnv,
      env: {
        STRATA_MAX_JSON_DEPTH: '32',
        STRATA_HTTP_HEADERS_TIMEOUT_MS: '2000',
        STRATA_HTTP_REQUEST_TIMEOUT_MS: '5000',
        STRATA_HTTP_KEEP_ALIVE_TIMEOUT_MS: '65000',
      },
    });
    expect(set.http).toEqual({
      maxJsonDepth: 32,
      headersTimeoutMs: 2000,
      requestTimeoutMs: 5000,
      keepAliveTimeoutMs: 65000,
    });
    const err = (() => {
      try {
        loadConfig({
          schema: baseServiceSchema,
          envMap: baseServiceEnv,
          env: { STRATA_HTTP_HEADERS_TIMEOUT_MS: '60000', STRATA_MAX_JSON_DEPTH: '100000' },
        });
      } catch (e) {
        return e as ConfigError;
      }
      throw new Error('expected a ConfigError');
    })();
    expect(err.problems).toEqual([
      'http.maxJsonDepth (env STRATA_MAX_JSON_DEPTH): Too big: expected number to be <=1024',
      'http.headersTimeoutMs (env STRATA_HTTP_HEADERS_TIMEOUT_MS): must not exceed requestTimeoutMs (the whole request includes its headers)',
    ]);
  });

  const limits = { headersTimeoutMs: 300, requestTimeoutMs: 600, keepAliveTimeoutMs: 400 };
  const slack = 400;

  async function listening(): Promise<{ app: FastifyInstance; port: number }> {
    const app = build(limits);
    app.post('/stream', (request, reply) => {
      reply.hijack();
      reply.raw.writeHead(200, { 'content-type': 'text/event-stream' });
      let n = 0;
      const timer = setInterval(() => {
        reply.raw.write(`data: ${JSON.stringify({ n, of: request.body })}\n\n`);
        if (++n === 15) {
          clearInterval(timer);
          reply.raw.end('data: [DONE]\n\n');
        }
      }, 100);
    });
    await app.listen({ host: '127.0.0.1', port: 0 });
    return { app, port: (app.server.address() as AddressInfo).port };
  }

  it('closes a connection whose headers arrive a byte at a time, with a 408', async () => {
    const { port } = await listening();
    const result = await trickle(
      port,
      'POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n',
      {
        intervalMs: 50,
        giveUpMs: 5000,
      },
    );
    expect(result.closedAfterMs).toBeDefined();
    expect(result.closedAfterMs).toBeGreaterThanOrEqual(limits.headersTimeoutMs - 20);
    expect(result.closedAfterMs).toBeLessThan(limits.headersTimeoutMs + slack);
    expect(result.received).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
    expect(result.received).toContain('"code":"STRATA_REQUEST_TIMEOUT"');
    expect(result.received).toContain('headers are due within 300 ms and the whole request within 600 ms');
  });

  it('closes a connection whose body arrives a byte at a time, with a 408', async () => {
    const { port } = await listening();
    const body = JSON.stringify({ prompt: 'x'.repeat(100) });
    const result = await trickle(port, body, {
      prefix: `POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`,
      intervalMs: 50,
      giveUpMs: 5000,
    });
    expect(result.closedAfterMs).toBeGreaterThanOrEqual(limits.requestTimeoutMs - 20);
    expect(result.closedAfterMs).toBeLessThan(limits.requestTimeoutMs + slack);
    expect(result.bytesSent).toBeLessThan(body.length);
    expect(result.received).toMatch(/^HTTP\/1\.1 408 /);
    expect(result.received).toContain('"code":"STRATA_REQUEST_TIMEOUT"');
  });

  it('accepts a body whose characters arrive split across many small writes', async () => {
    const { port } = await listening();
    const body = Buffer.from('{"prompt":"café € 😀 \\ud83d\\ude00"}');
    const result = await trickle(port, body, {
      prefix: `POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`,
      intervalMs: 5,
      giveUpMs: 5000,
    });
    expect(result.received).toMatch(/^HTTP\/1\.1 200 /);
    expect(result.received).toContain('{"got":{"prompt":"café € 😀 😀"}}');
  });

  it('serves on and closes promptly after a client leaves in the middle of its body', async () => {
    const { app, port } = await listening();
    const socket = connect(port, '127.0.0.1');
    socket.write(
      'POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"prompt":"ha',
    );
    await new Promise((r) => setTimeout(r, 50));
    socket.destroy();
    expect((await fetch(`http://127.0.0.1:${port}/health/live`)).status).toBe(200);
    const started = performance.now();
    await app.close();
    expect(performance.now() - started).toBeLessThan(1000);
  });

  it('closes a connection that never sends a byte, and an idle keep-alive one', async () => {
    const { port } = await listening();
    const silent = await trickle(port, '', { intervalMs: 50, giveUpMs: 5000 });
    expect(silent.closedAfterMs).toBeLessThan(limits.headersTimeoutMs + slack);
    // After a response, the keep-alive timeout (plus Node's 1 s keepAliveTimeoutBuffer) applies.
    const idle = await trickle(port, '', {
      prefix: 'GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n',
      intervalMs: 50,
      giveUpMs: 5000,
    });
    expect(idle.received).toMatch(/^HTTP\/1\.1 200 /);
    expect(idle.closedAfterMs).toBeGreaterThanOrEqual(limits.keepAliveTimeoutMs);
    expect(idle.closedAfterMs).toBeLessThan(limits.keepAliveTimeoutMs + 1000 + slack);
  });

  it('does not cut a streamed response that lasts longer than the request timeout', async () => {
    const { port } = await listening();
    const started = performance.now();
    const res = await fetch(`http://127.0.0.1:${port}/stream`, {
      method: 'POST',
      headers: JSON_HEADERS,
      body: '{"prompt":"hi"}',
    });
    const text = await res.text();
    const took = performance.now() - started;
    expect(took).toBeGreaterThan(limits.requestTimeoutMs * 2);
    expect(text.match(/^data: \{/gm)).toHaveLength(15);
    expect(text).toContain('data: {"n":14,"of":{"prompt":"hi"}}');
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
  });

  it('answers oversized headers and what is not HTTP with catalogue errors, then closes', async () => {
    const { port } = await listening();
    const exchange = async (data: string) => {
      const socket = connect(port, '127.0.0.1');
      let text = '';
      socket.setEncoding('utf8').on('data', (chunk) => {
        text += chunk;
      });
      socket.on('error', () => {});
      socket.write(data);
      await once(socket, 'close');
      return text;
    };
    const big = await exchange(
      `GET /health/live HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`,
    );
    expect(big).toMatch(/^HTTP\/1\.1 431 /);
    expect(big).toContain(
      '{"error":{"code":"STRATA_HEADERS_TOO_LARGE","message":"The request headers are too large."',
    );
    const garbage = await exchange('NOT HTTP AT ALL\r\n\r\n');
    expect(garbage).toMatch(/^HTTP\/1\.1 400 /);
    expect(garbage).toContain(
      '"code":"STRATA_INVALID_REQUEST","message":"The request is not valid HTTP/1.1."',
    );
  });

  it('must be applied before the app listens', async () => {
    const { app } = await listening();
    expect(() => applyHttpLimits(app, DEFAULT_HTTP_LIMITS)).toThrow('before the app listens');
  });
});
