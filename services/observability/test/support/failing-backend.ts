// A backend that is ready, reports an empty queue, and fails every request with a 500: the
// fault that makes the router retry on another backend and eject this one (router dashboard:
// retries, ejections). Real HTTP on a free port.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { LoadReport } from '@strata/common';
import { idleLoadReport } from '@strata/common/testing';

export async function startFailingBackend(model: string): Promise<{ url: string; server: Server }> {
  const server = createServer((req, res) => {
    const json = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (req.method === 'GET' && req.url === '/health/ready')
      return json(200, { ready: true, draining: false, checks: {} });
    if (req.method === 'GET' && req.url === '/health/live') return json(200, { status: 'ok' });
    if (req.method === 'GET' && req.url === '/load') {
      const load: LoadReport = { ...idleLoadReport(model), timestamp_ms: Date.now() };
      return json(200, load);
    }
    req.resume();
    req.on('end', () =>
      json(500, { error: { code: 'STRATA_ENGINE_ERROR', message: 'injected fault', type: 'internal' } }),
    );
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}
