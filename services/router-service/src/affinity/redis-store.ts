// Redis SessionStore shared by all router replicas: keys `strata:session:<id>` with a PX TTL.
// Fails fast when Redis is down: no offline queue (commands are rejected at once while
// disconnected), no retries of in-flight commands, a short command timeout; ioredis keeps
// reconnecting in the background, so the store recovers by itself when Redis is back.
import { Redis, type Result } from 'ioredis';
import type { SessionStore } from './store.js';

export const SESSION_KEY_PREFIX = 'strata:session:';

// GET and PEXPIRE in one step, so a read never races an expiry or another replica's write.
const GET_AND_TOUCH_LUA = `
local v = redis.call('GET', KEYS[1])
if v then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return v`;

// Compare-and-delete: forget a stale mapping only if no replica has reassigned it meanwhile.
const DELETE_IF_LUA = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`;

declare module 'ioredis' {
  interface RedisCommander<Context> {
    strataSessionGetAndTouch(key: string, ttlMs: number): Result<string | null, Context>;
    strataSessionDeleteIf(key: string, backend: string): Result<number, Context>;
  }
}

export interface RedisSessionStoreOptions {
  /** redis://host:port/db */
  url: string;
  /** Per-command timeout in ms. Default 150. */
  commandTimeoutMs?: number;
  /** TCP connect timeout in ms. Default 500. */
  connectTimeoutMs?: number;
  /** Longest pause between reconnection attempts in ms. Default 1000. */
  maxReconnectDelayMs?: number;
  /** Called with each connection-level error (ioredis emits them as events). */
  onConnectionError?: (err: Error) => void;
}

export class RedisSessionStore implements SessionStore {
  readonly client: Redis;

  constructor(options: RedisSessionStoreOptions) {
    const maxDelay = options.maxReconnectDelayMs ?? 1000;
    this.client = new Redis(options.url, {
      commandTimeout: options.commandTimeoutMs ?? 150,
      connectTimeout: options.connectTimeoutMs ?? 500,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      enableReadyCheck: true,
      lazyConnect: true,
      retryStrategy: (times) => Math.min(50 * 2 ** Math.min(times, 10), maxDelay),
    });
    // Without a listener ioredis prints every connection error to stderr.
    this.client.on('error', (err: Error) => options.onConnectionError?.(err));
    this.client.defineCommand('strataSessionGetAndTouch', { numberOfKeys: 1, lua: GET_AND_TOUCH_LUA });
    this.client.defineCommand('strataSessionDeleteIf', { numberOfKeys: 1, lua: DELETE_IF_LUA });
    // Connect in the background; a first failure is retried by retryStrategy.
    this.client.connect().catch(() => {});
  }

  /** Resolves once connected (or rejects after timeoutMs); the store works without awaiting it. */
  async waitReady(timeoutMs = 2000): Promise<void> {
    if (this.client.status === 'ready') return;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.client.off('ready', onReady);
        reject(new Error(`redis not ready after ${timeoutMs} ms (status ${this.client.status})`));
      }, timeoutMs);
      const onReady = (): void => {
        clearTimeout(timer);
        resolve();
      };
      this.client.once('ready', onReady);
    });
  }

  async get(session: string): Promise<string | undefined> {
    return (await this.client.get(key(session))) ?? undefined;
  }

  async getAndTouch(session: string, ttlMs: number): Promise<string | undefined> {
    return (await this.client.strataSessionGetAndTouch(key(session), ttl(ttlMs))) ?? undefined;
  }

  async set(session: string, backend: string, ttlMs: number): Promise<void> {
    await this.client.set(key(session), backend, 'PX', ttl(ttlMs));
  }

  async deleteIf(session: string, backend: string): Promise<void> {
    await this.client.strataSessionDeleteIf(key(session), backend);
  }

  async delete(session: string): Promise<void> {
    await this.client.del(key(session));
  }

  async close(): Promise<void> {
    // quit() waits for a reply, which never comes while Redis is down: disconnect instead.
    if (this.client.status === 'ready') {
      await this.client.quit().catch(() => this.client.disconnect());
    } else {
      this.client.disconnect();
    }
  }
}

function key(session: string): string {
  return SESSION_KEY_PREFIX + session;
}

function ttl(ttlMs: number): number {
  const ms = Math.ceil(ttlMs);
  if (!Number.isFinite(ms) || ms < 1) throw new RangeError(`ttlMs must be >= 1, got ${ttlMs}`);
  return ms;
}
