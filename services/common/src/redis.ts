// The one Redis client policy of the platform's shared stores (router session affinity, edge
// quotas): a store must never hold a request while Redis is away. So: no offline queue
// (commands are rejected at once while disconnected), no retries of in-flight commands, a short
// command timeout, and reconnection in the background, so the store recovers by itself.
import { Redis } from 'ioredis';

export interface FailFastRedisOptions {
  /** Per-command timeout in ms: the longest a request can wait on Redis. */
  commandTimeoutMs: number;
  /** TCP connect timeout in ms. Default 500. */
  connectTimeoutMs?: number;
  /** Longest pause between reconnection attempts in ms. Default 1000. */
  maxReconnectDelayMs?: number;
  /** Called with each connection-level error (ioredis emits them as events). */
  onConnectionError?: (err: Error) => void;
}

/** A client connecting in the background; commands fail fast until it is ready. */
export function failFastRedis(url: string, options: FailFastRedisOptions): Redis {
  const maxDelay = options.maxReconnectDelayMs ?? 1000;
  const client = new Redis(url, {
    commandTimeout: options.commandTimeoutMs,
    connectTimeout: options.connectTimeoutMs ?? 500,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    enableReadyCheck: true,
    lazyConnect: true,
    retryStrategy: (times) => Math.min(50 * 2 ** Math.min(times, 10), maxDelay),
  });
  // Without a listener ioredis prints every connection error to stderr.
  client.on('error', (err: Error) => options.onConnectionError?.(err));
  // Connect in the background; a first failure is retried by retryStrategy.
  client.connect().catch(() => {});
  return client;
}

/** Resolves once connected, or rejects after timeoutMs; the stores work without awaiting it. */
export async function waitRedisReady(client: Redis, timeoutMs = 2000): Promise<void> {
  if (client.status === 'ready') return;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      client.off('ready', onReady);
      reject(new Error(`redis not ready after ${timeoutMs} ms (status ${client.status})`));
    }, timeoutMs);
    const onReady = (): void => {
      clearTimeout(timer);
      resolve();
    };
    client.once('ready', onReady);
  });
}

/** Quits cleanly when connected; quit() would wait forever for a Redis that is down. */
export async function closeRedis(client: Redis): Promise<void> {
  if (client.status === 'ready') await client.quit().catch(() => client.disconnect());
  else client.disconnect();
}
