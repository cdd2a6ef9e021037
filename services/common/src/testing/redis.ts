// A real Redis for tests: STRATA_TEST_REDIS_URL when set (CI), otherwise a private
// redis-server on a free 127.0.0.1 port, without persistence. A spawned server can be stopped
// and started again on the same port (to test Redis going away mid-test).
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';

export const REDIS_SERVER_BIN = process.env.STRATA_TEST_REDIS_SERVER ?? 'redis-server';

/** Whether a redis-server binary can be spawned here (the stop/restart tests need one). */
export function canSpawnRedis(): boolean {
  return redisServerMissing() === undefined;
}

/** Why redis-server cannot be spawned here, or undefined when it can. */
function redisServerMissing(): string | undefined {
  const probe = spawnSync(REDIS_SERVER_BIN, ['--version'], { stdio: 'ignore' });
  if (probe.error) return `${REDIS_SERVER_BIN} not found: ${probe.error.message}`;
  return probe.status === 0 ? undefined : `${REDIS_SERVER_BIN} --version exited with ${probe.status}`;
}

/** '' when redis-server can be spawned, else ' (skipped: <why>)' for a describe/it title. */
export function redisServerSkip(): string {
  const missing = redisServerMissing();
  return missing === undefined ? '' : ` (skipped: ${missing})`;
}

export async function freePort(): Promise<number> {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === 'string') throw new Error('no port from the OS');
  return address.port;
}

/** PING over raw RESP; resolves true on +PONG within timeoutMs. */
export async function ping(port: number, host = '127.0.0.1', timeoutMs = 200): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host });
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('error', () => done(false));
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (data) => done(data.toString().startsWith('+PONG')));
  });
}

export class SpawnedRedis {
  private child: ChildProcess | undefined;

  private constructor(readonly port: number) {}

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  static async start(): Promise<SpawnedRedis> {
    const redis = new SpawnedRedis(await freePort());
    await redis.restart();
    return redis;
  }

  /** (Re)start the server on the same port and wait until it answers PING (at most 5 s). */
  async restart(): Promise<void> {
    if (this.child) throw new Error('redis-server is already running');
    const child = spawn(
      REDIS_SERVER_BIN,
      ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      { stdio: 'ignore' },
    );
    this.child = child;
    const exited = once(child, 'exit').then(() => 'exited' as const);
    for (let i = 0; i < 100; i++) {
      if (await ping(this.port)) return;
      const early = await Promise.race([exited, sleep(50).then(() => 'waiting' as const)]);
      if (early === 'exited') break;
    }
    await this.stop();
    throw new Error(`redis-server did not answer PING on port ${this.port}`);
  }

  /** Kill the server (SIGKILL: connections drop at once, like a crash) and wait for it to exit. */
  async stop(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
  }
}

export interface TestRedis {
  url: string;
  /** The spawned server, or undefined when STRATA_TEST_REDIS_URL points at a shared one. */
  spawned: SpawnedRedis | undefined;
  close(): Promise<void>;
}

/** STRATA_TEST_REDIS_URL when set, else a spawned server. */
export async function testRedis(): Promise<TestRedis> {
  const url = process.env.STRATA_TEST_REDIS_URL;
  if (url) return { url, spawned: undefined, close: async () => {} };
  const spawned = await SpawnedRedis.start();
  return { url: spawned.url, spawned, close: () => spawned.stop() };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
