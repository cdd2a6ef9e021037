// A real HTTP server on 127.0.0.1 standing in for the router where the test needs to see exactly
// what the edge sent, or to make the upstream misbehave (fail mid-stream, never answer).
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Received {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

export type Answer = (req: Received, res: http.ServerResponse) => void;

export const jsonAnswer =
  (status: number, body: unknown): Answer =>
  (_req, res) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };

export class RecordingUpstream {
  readonly received: Received[] = [];
  answer: Answer = jsonAnswer(200, { text: 'ok', usage: { input_tokens: 1, output_tokens: 1 } });
  private readonly server = http.createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      const got = {
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(parts).toString('utf8'),
      };
      this.received.push(got);
      this.answer(got, res);
    });
  });

  static async start(): Promise<RecordingUpstream> {
    const upstream = new RecordingUpstream();
    upstream.server.listen(0, '127.0.0.1');
    await once(upstream.server, 'listening');
    return upstream;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
