// Minimal streaming upstream for the hop benchmarks (hop-lib.mjs): answers like a backend as cheaply as possible
// (health, load, and a 4-event SSE stream per request). Prints its URL, then serves.
import { createServer } from 'node:http';
// The same idle report the services' tests stand in with (build @strata/common first).
import { idleLoadReport } from '../../services/common/dist/testing/load.js';

// The router polls /load; a fresh timestamp each time keeps the report from going stale.
const load = () => JSON.stringify({ ...idleLoadReport('bench'), timestamp_ms: Date.now() });
const events = [
  '{"type":"token","token":" a","id":1,"index":0}',
  '{"type":"token","token":" b","id":2,"index":1}',
  '{"type":"token","token":" c","id":3,"index":2}',
  '{"type":"done","finish_reason":"length","usage":{"input_tokens":3,"output_tokens":3}}',
];
const server = createServer((req, res) => {
  if (req.url === '/health/ready')
    return res.writeHead(200, { 'content-type': 'application/json' }).end('{"ready":true}');
  if (req.url === '/load') return res.writeHead(200, { 'content-type': 'application/json' }).end(load());
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
    for (const e of events) res.write(`data: ${e}\n\n`);
    res.end();
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () =>
  process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${server.address().port}` })}\n`),
);
