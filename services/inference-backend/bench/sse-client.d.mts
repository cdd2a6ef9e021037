export interface SseClientResult {
  requestId: string;
  /** The stream ended with a `done` event. */
  ok: boolean;
  /** HTTP status; 0 when the connection failed. */
  status: number;
  /** When the request was sent, ms on CLOCK_MONOTONIC. */
  sent: number;
  /** When the event of token k was read, ms on CLOCK_MONOTONIC; undefined if never seen. */
  times: (number | undefined)[];
}
/** Compiles sse-client.c with $CC (default cc) once per source version; returns the binary. */
export function buildSseClient(): string;
/** Streams the requests to `${url}/v1/generate` in waves of `concurrency`. */
export function runSseClient(
  binary: string,
  url: string,
  concurrency: number,
  requests: { requestId: string; body: unknown }[],
): Promise<SseClientResult[]>;
