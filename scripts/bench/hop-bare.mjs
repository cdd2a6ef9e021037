// The baseline of the hop benchmarks (hop-lib.mjs): the barest proxy node:http makes, in its own
// process. Every request goes to the upstream over a keep-alive agent, request and response
// piped through unchanged, nothing else (no parsing, no validation, no logging). What a hop
// adds beyond this is what the service does; the rest is the cost of any Node proxy on this
// machine. argv: the upstream's URL. Prints its own URL, then serves.
import { Agent, createServer, request } from 'node:http';

const upstream = new URL(process.argv[2]);
const agent = new Agent({ keepAlive: true, maxSockets: 512 });
const server = createServer((req, res) => {
  const out = request(
    {
      agent,
      host: upstream.hostname,
      port: upstream.port,
      method: req.method,
      path: req.url,
      headers: req.headers,
    },
    (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    },
  );
  out.on('error', () => res.destroy());
  req.pipe(out);
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () =>
  process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${server.address().port}` })}\n`),
);
