// Server-sent events on a hijacked Fastify reply: each event is written and flushed at once
// (TCP_NODELAY, no proxy buffering), idle streams get a comment heartbeat, writes respect
// backpressure, and a closed connection aborts `signal` so the engine frees the sequence.
import { writeWithBackpressure } from '@strata/common';
import type { FastifyReply } from 'fastify';

export class SseStream {
  private readonly controller = new AbortController();
  private heartbeat: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly reply: FastifyReply,
    private readonly heartbeatMs: number,
  ) {}

  /** Aborted when the client goes away before the stream ended. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Sends the 200 and the headers; from here on errors travel as events. */
  open(extraHeaders: Record<string, string> = {}): void {
    const res = this.reply.raw;
    this.reply.hijack();
    res.socket?.setNoDelay(true);
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      'x-accel-buffering': 'no', // nginx and friends: do not buffer the stream
      'x-request-id': this.reply.request.id,
      ...extraHeaders,
    });
    res.flushHeaders();
    res.on('close', () => {
      if (!this.closed) this.controller.abort('abort');
      this.stopHeartbeat();
    });
    this.armHeartbeat();
  }

  /** Writes one `data:` event; resolves when the socket can take more (backpressure). */
  async send(data: unknown): Promise<void> {
    await this.write(`data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`);
  }

  end(): void {
    if (this.closed) return;
    this.closed = true;
    this.stopHeartbeat();
    this.reply.raw.end();
  }

  private async write(chunk: string): Promise<void> {
    const res = this.reply.raw;
    if (this.closed || res.destroyed) return;
    this.armHeartbeat();
    await writeWithBackpressure(res, chunk);
  }

  // Restarted by every write, so only idle streams carry heartbeats.
  private armHeartbeat(): void {
    this.stopHeartbeat();
    this.heartbeat = setTimeout(() => {
      void this.write(': heartbeat\n\n');
    }, this.heartbeatMs);
    this.heartbeat.unref();
  }

  private stopHeartbeat(): void {
    if (this.heartbeat) clearTimeout(this.heartbeat);
    this.heartbeat = undefined;
  }
}
