// Writing a response body as fast as the client reads it, no faster.
import type { Writable } from 'node:stream';

/**
 * Writes a chunk and, when the stream's buffer is full, waits until it drains or closes: a
 * slow client slows the writer instead of growing memory without bound.
 */
export async function writeWithBackpressure(stream: Writable, chunk: string | Uint8Array): Promise<void> {
  if (stream.write(chunk)) return;
  await new Promise<void>((resolve) => {
    const done = () => {
      stream.off('drain', done);
      stream.off('close', done);
      resolve();
    };
    stream.on('drain', done);
    stream.on('close', done);
  });
}
