// A client that reads its response one byte at a time (paused stream, read(1) per turn of the
// event loop), so the server's writes meet backpressure instead of a fast reader.
import { request } from 'node:http';
import { authHeaders } from '../../src/harness.js';

export interface SlowResult {
  status: number;
  body: string;
  bytesRead: number;
}

export function slowGenerate(
  baseUrl: string,
  apiKey: string,
  body: Record<string, unknown>,
): Promise<SlowResult> {
  const url = new URL('/v1/generate', baseUrl);
  const payload = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(payload),
          ...authHeaders(apiKey),
        },
      },
      (res) => {
        res.pause();
        const bytes: Buffer[] = [];
        let ended = false;
        res.once('end', () => {
          ended = true;
        });
        res.once('error', reject);
        const pump = async () => {
          for (;;) {
            const one = res.read(1) as Buffer | null;
            if (one) {
              bytes.push(one);
              await new Promise((r) => setImmediate(r));
              continue;
            }
            if (ended || res.readableEnded) break;
            await new Promise((r) => {
              res.once('readable', r);
              res.once('end', r);
            });
            if (res.readableEnded && res.readableLength === 0) break;
          }
          const all = Buffer.concat(bytes);
          resolve({ status: res.statusCode ?? 0, body: all.toString('utf8'), bytesRead: all.length });
        };
        pump().catch(reject);
      },
    );
    req.once('error', reject);
    req.end(payload);
  });
}
