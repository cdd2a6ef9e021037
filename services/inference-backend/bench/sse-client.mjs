// Builds and runs sse-client.c (see its header): the light SSE client of http-latency.mjs.
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, renameSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const source = join(dirname(fileURLToPath(import.meta.url)), 'sse-client.c');

/**
 * Compiles sse-client.c with $CC (default cc) once per source version; returns the binary.
 * STRATA_SSE_CLIENT names one built before (the service bundle's, for a machine without cc).
 */
export function buildSseClient() {
  if (process.env.STRATA_SSE_CLIENT) return process.env.STRATA_SSE_CLIENT;
  const hash = createHash('sha256').update(readFileSync(source)).digest('hex').slice(0, 12);
  const binary = join(tmpdir(), `strata-sse-client-${hash}`);
  if (existsSync(binary)) return binary;
  const cc = process.env.CC ?? 'cc';
  const partial = `${binary}.${process.pid}.tmp`;
  try {
    execFileSync(cc, ['-O2', '-Wall', '-o', partial, source], { stdio: ['ignore', 'inherit', 'inherit'] });
  } catch (error) {
    throw new Error(`building ${source} with ${cc} failed: ${error.message}`);
  }
  renameSync(partial, binary);
  return binary;
}

/**
 * Streams `requests` ({ requestId, body }) to `${url}/v1/generate` in waves of `concurrency`,
 * resolving to one { requestId, ok, status, sent, times } per request, in order. `times[k]` is
 * when the event of token k was read, in ms on CLOCK_MONOTONIC (process.hrtime's clock);
 * undefined for an index never seen. `ok`: the stream ended with a `done` event.
 */
export function runSseClient(binary, url, concurrency, requests) {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const child = spawn(binary, [hostname, port, String(concurrency)], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (chunk) => {
      out += chunk;
    });
    child.stderr.setEncoding('utf8').on('data', (chunk) => {
      err += chunk;
    });
    child.once('error', reject);
    child.once('close', (code) => {
      if (code !== 0) return reject(new Error(`sse-client exited with ${code}: ${err.trim()}`));
      const lines = out.split('\n').filter((line) => line !== '');
      resolve(
        lines.map((line) => {
          const [requestId, ok, status, sent, ...times] = line.split(' ');
          return {
            requestId,
            ok: ok === '1',
            status: Number(status),
            sent: Number(sent),
            times: times.map((t) => (t === '-' ? undefined : Number(t))),
          };
        }),
      );
    });
    child.stdin.end(requests.map((r) => `${r.requestId}\t${JSON.stringify(r.body)}\n`).join(''));
  });
}
