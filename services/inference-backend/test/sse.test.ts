// SSE framing and heartbeats on a real backend (port 0, real engine, tinystories-656k): a stream
// waiting in the queue gets `: heartbeat` comments and still ends normally; HTTP/1.1 clients get
// chunked frames, HTTP/1.0 clients the plain event stream ended by closing the connection.
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBackend, type TestBackend } from './support/backend.js';
import { optionalModel } from './support/models.js';

const tiny = optionalModel('tinystories-656k');

const HEARTBEAT_MS = 100;

/** A raw HTTP request (no half-close: that reads as the client leaving); resolves with everything the server sent once it closes. */
function rawRequest(url: string, request: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.write(request));
    let out = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      out += chunk;
    });
    socket.on('end', () => resolve(out));
    socket.on('error', reject);
  });
}

const body = (maxTokens: number) =>
  JSON.stringify({ prompt: 'Once upon a time', max_tokens: maxTokens, ignore_eos: true, stream: true });

describe.skipIf(!tiny.path)(`SSE streams${tiny.skipped}`, () => {
  let backend: TestBackend;
  beforeAll(async () => {
    // One sequence at a time, so later requests wait in the queue without output.
    backend = await startBackend({
      STRATA_WARMUP: 'false',
      STRATA_MAX_NUM_SEQS: '1',
      STRATA_SSE_HEARTBEAT_MS: String(HEARTBEAT_MS),
    });
  });
  afterAll(() => backend.close());

  it('sends heartbeat comments on a stream waiting in the queue, then its tokens and done', async () => {
    const post = (maxTokens: number) =>
      fetch(`${backend.url}/v1/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: body(maxTokens),
      });
    // Eight long requests ahead keep the engine busy for far longer than 1.5 heartbeat periods.
    const ahead = Array.from({ length: 8 }, () => post(490).then((r) => r.text()));
    const waiting = await post(4);
    const text = await waiting.text();
    await Promise.all(ahead);
    const frames = text.split('\n\n').filter((f) => f !== '');
    const firstToken = frames.findIndex((f) => f.includes('"type":"token"'));
    expect(frames.slice(0, firstToken)).toContain(': heartbeat');
    expect(frames.filter((f) => f.startsWith('data: ')).map((f) => JSON.parse(f.slice(6)).type)).toEqual([
      'token',
      'token',
      'token',
      'token',
      'done',
    ]);
  }, 30_000);

  it('frames the stream as HTTP/1.1 chunks that decode to the events', async () => {
    const out = await rawRequest(
      backend.url,
      `POST /v1/generate HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body(3))}\r\n\r\n${body(3)}`,
    );
    const [head = '', ...rest] = out.split('\r\n\r\n');
    expect(head).toMatch(/^HTTP\/1\.1 200/);
    expect(head.toLowerCase()).toContain('transfer-encoding: chunked');
    // Decode the chunks: hex length CRLF data CRLF ... 0 CRLF CRLF.
    let raw = rest.join('\r\n\r\n');
    let decoded = '';
    for (;;) {
      const eol = raw.indexOf('\r\n');
      const size = Number.parseInt(raw.slice(0, eol), 16);
      if (size === 0) break;
      const data = Buffer.from(raw.slice(eol + 2), 'utf8')
        .subarray(0, size)
        .toString('utf8');
      decoded += data;
      raw = raw.slice(eol + 2 + data.length + 2);
    }
    const events = decoded
      .split('\n\n')
      .filter((f) => f.startsWith('data: '))
      .map((f) => JSON.parse(f.slice(6)).type);
    expect(events).toEqual(['token', 'token', 'token', 'done']);
  });

  it('streams plain events to an HTTP/1.0 client and closes the connection at the end', async () => {
    const out = await rawRequest(
      backend.url,
      `POST /v1/generate HTTP/1.0\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body(3))}\r\n\r\n${body(3)}`,
    );
    const [head = '', ...rest] = out.split('\r\n\r\n');
    expect(head).toMatch(/^HTTP\/1\.1 200/);
    expect(head.toLowerCase()).not.toContain('transfer-encoding');
    const events = rest
      .join('\r\n\r\n')
      .split('\n\n')
      .filter((f) => f.startsWith('data: '))
      .map((f) => JSON.parse(f.slice(6)).type);
    expect(events).toEqual(['token', 'token', 'token', 'done']);
  });
});
