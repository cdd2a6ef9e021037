// A real HTTP server on 127.0.0.1 standing in for an inference backend's /health/ready and
// /load, with answers the test controls. Requests to other paths are recorded, body as
// received, and answered with `answer` (default: 404, no body).
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { LoadReport } from '@strata/common';
import { idleLoadReport } from '@strata/common/testing';

export interface ReceivedRequest {
  method: string;
  path: string;
  contentType: string | undefined;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

export class FakeBackend {
  readyStatus = 200;
  /** 'ok': answer; 'hang': never answer /load; 'garbage': invalid JSON. */
  loadMode: 'ok' | 'hang' | 'garbage' = 'ok';
  /** 'ok': answer /health/ready with readyStatus; 'hang': never answer it. */
  readyMode: 'ok' | 'hang' = 'ok';
  load: Omit<LoadReport, 'timestamp_ms'> = idleLoadReport('test-model');
  readonly hits = { ready: 0, load: 0 };
  readonly received: ReceivedRequest[] = [];
  answer: { status: number; json?: unknown } = { status: 404 };
  private server: http.Server;
  private port = 0;

  private constructor() {
    this.server = this.create();
  }

  static async start(): Promise<FakeBackend> {
    const backend = new FakeBackend();
    await backend.listen(0);
    return backend;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Close the server and every open connection (the backend is gone). */
  async close(): Promise<void> {
    if (!this.server.listening) return;
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.server.closeAllConnections();
    await closed;
  }

  /** Listen again on the same port (the backend came back). */
  async reopen(): Promise<void> {
    this.server = this.create();
    await this.listen(this.port);
  }

  private create(): http.Server {
    return http.createServer((req, res) => {
      if (req.url === '/health/ready') {
        this.hits.ready += 1;
        if (this.readyMode === 'hang') return;
        res.writeHead(this.readyStatus, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ ready: this.readyStatus === 200 }));
      } else if (req.url === '/load') {
        this.hits.load += 1;
        if (this.loadMode === 'hang') return;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          this.loadMode === 'garbage'
            ? '{"ready":'
            : JSON.stringify({ ...this.load, timestamp_ms: Date.now() }),
        );
      } else {
        const chunks: Buffer[] = [];
        req.on('data', (chunk: Buffer) => chunks.push(chunk));
        req.on('end', () => {
          this.received.push({
            method: req.method ?? '',
            path: req.url ?? '',
            contentType: req.headers['content-type'],
            headers: req.headers,
            body: Buffer.concat(chunks),
          });
          const { status, json } = this.answer;
          if (json === undefined) res.writeHead(status).end();
          else res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(json));
        });
      }
    });
  }

  private async listen(port: number): Promise<void> {
    this.server.listen(port, '127.0.0.1');
    await once(this.server, 'listening');
    this.port = (this.server.address() as AddressInfo).port;
  }
}
