// Redis SessionStore shared by all router replicas: keys `strata:session:<id>` with a PX TTL.
// Fails fast when Redis is down and recovers by itself when it is back (@strata/common
// failFastRedis).
import { closeRedis, type FailFastRedisOptions, failFastRedis, waitRedisReady } from '@strata/common';
import type { Redis, Result } from 'ioredis';
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

export interface RedisSessionStoreOptions extends Omit<FailFastRedisOptions, 'commandTimeoutMs'> {
  /** redis://host:port/db */
  url: string;
  /** Per-command timeout in ms. Default 150. */
  commandTimeoutMs?: number;
}

export class RedisSessionStore implements SessionStore {
  readonly client: Redis;

  constructor(options: RedisSessionStoreOptions) {
    this.client = failFastRedis(options.url, {
      ...options,
      commandTimeoutMs: options.commandTimeoutMs ?? 150,
    });
    this.client.defineCommand('strataSessionGetAndTouch', { numberOfKeys: 1, lua: GET_AND_TOUCH_LUA });
    this.client.defineCommand('strataSessionDeleteIf', { numberOfKeys: 1, lua: DELETE_IF_LUA });
  }

  /** Resolves once connected (or rejects after timeoutMs); the store works without awaiting it. */
  waitReady(timeoutMs = 2000): Promise<void> {
    return waitRedisReady(this.client, timeoutMs);
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

  close(): Promise<void> {
    return closeRedis(this.client);
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
