// Server-sent events on a hijacked Fastify reply. Events are framed here and written straight to
// the socket: everything sent during one event-loop turn leaves in one write, so an engine
// delivery that carries several tokens for a stream costs that stream one syscall, and a single
// token leaves at once (TCP_NODELAY, no proxy buffering). Idle streams get a comment heartbeat;
// writes respect backpressure; a closed connection aborts `signal` so the engine frees the
// sequence.
import type { Socket } from 'node:net';
import type { FastifyReply } from 'fastify';

const HEARTBEAT = ': heartbeat\n\n';

export class SseStream {
  private readonly controller = new AbortController();
  private socket: Socket | null = null;
  /** HTTP/1.1 chunked framing (the response has no length); false for an HTTP/1.0 client. */
  private chunked = false;
  /** Text sent this turn, written by flush() once the turn's microtasks are done. */
  private pending = '';
  private flushQueued = false;
  /** Set while the socket's buffer is full: send() callers wait on it. */
  private drained: Promise<void> | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  /** Heartbeat checks (every heartbeatMs / 2) since the last write; 3 = idle at least heartbeatMs. */
  private idleChecks = 0;
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
      // No connection header: Node keeps the connection alive unless the client said close.
      'x-accel-buffering': 'no', // nginx and friends: do not buffer the stream
      'x-request-id': this.reply.request.id,
      ...extraHeaders,
    });
    res.flushHeaders();
    this.socket = res.socket;
    this.chunked = res.chunkedEncoding;
    res.on('close', () => {
      if (!this.closed) this.controller.abort('abort');
      this.stopHeartbeat();
    });
    // One timer per stream for its whole life: a write only resets a counter.
    this.heartbeat = setInterval(() => {
      if (++this.idleChecks >= 3) this.write(HEARTBEAT);
    }, this.heartbeatMs / 2);
    this.heartbeat.unref();
  }

  /**
   * Queues one `data:` event. Returns a promise only while the socket is full (backpressure);
   * callers await it before sending more.
   */
  send(data: unknown): Promise<void> | undefined {
    return this.write(`data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`);
  }

  end(): void {
    if (this.closed) return;
    this.flush();
    this.closed = true;
    this.stopHeartbeat();
    this.reply.raw.end(); // the chunked terminator, after the frames above
  }

  private write(text: string): Promise<void> | undefined {
    if (this.closed || !this.socket || this.socket.destroyed) return undefined;
    this.idleChecks = 0;
    this.pending += text;
    if (!this.flushQueued) {
      this.flushQueued = true;
      process.nextTick(flushStream, this);
    }
    return this.drained;
  }

  /** @internal Writes what this turn queued as one chunk. */
  flush(): void {
    this.flushQueued = false;
    const body = this.pending;
    const socket = this.socket;
    if (body === '' || this.closed || !socket || socket.destroyed) return;
    this.pending = '';
    const frame = this.chunked ? `${Buffer.byteLength(body).toString(16)}\r\n${body}\r\n` : body;
    if (socket.write(frame) || this.drained) return;
    this.drained = new Promise<void>((resolve) => {
      const done = () => {
        socket.off('drain', done);
        socket.off('close', done);
        this.drained = undefined;
        resolve();
      };
      socket.on('drain', done);
      socket.on('close', done);
    });
  }

  private stopHeartbeat(): void {
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.heartbeat = undefined;
  }
}

function flushStream(stream: SseStream): void {
  stream.flush();
}
