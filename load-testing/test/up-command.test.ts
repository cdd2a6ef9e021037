// `up` as a user runs it, on free ports: the console shows the banner and then one short line
// per request, while every service's JSON lines land in its own file under the log folder;
// --verbose shows the JSON lines on the console instead.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SERVICE_NAMES, type ServiceName } from '../src/platform.js';
import { platformModel } from './support/models.js';

const cli = join(dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'cli.js');
const served = platformModel();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `strata-platform up` with these arguments, its console read line by line. */
class Up {
  readonly lines: string[] = [];
  readonly stderr: string[] = [];
  readonly process: ChildProcess;
  readonly urls = new Map<string, string>();

  constructor(
    readonly logDir: string,
    args: string[],
  ) {
    // No warmup: the model is ready as soon as it is loaded.
    this.process = spawn(process.execPath, [cli, 'up', '--ephemeral', '--log-dir', logDir, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, STRATA_WARMUP: 'false' },
    });
    createInterface({ input: this.process.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      this.lines.push(line);
      const m = /^ {2}(\S+)\s+(http:\/\/\S+)/.exec(line);
      if (m?.[1] && m[2]) this.urls.set(m[1], m[2]);
    });
    createInterface({ input: this.process.stderr as NodeJS.ReadableStream }).on('line', (line) =>
      this.stderr.push(line),
    );
  }

  /** The first console line matching `pattern`, once printed. */
  async waitFor(pattern: RegExp, timeoutMs: number): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const line = this.lines.find((l) => pattern.test(l));
      if (line !== undefined) return line;
      if (this.process.exitCode !== null) {
        throw new Error(
          `up exited (${this.process.exitCode}): ${[...this.lines, ...this.stderr].join('\n')}`,
        );
      }
      if (Date.now() > deadline) {
        throw new Error(`no line matching ${pattern} within ${timeoutMs} ms:\n${this.lines.join('\n')}`);
      }
      await sleep(50);
    }
  }

  log(service: ServiceName): Record<string, unknown>[] {
    return readFileSync(join(this.logDir, `${service}.log`), 'utf8')
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  }

  async stop(): Promise<number | null> {
    if (this.process.exitCode !== null) return this.process.exitCode;
    const exited = new Promise<number | null>((resolve) => this.process.once('exit', resolve));
    this.process.kill('SIGTERM');
    const timer = setTimeout(() => this.process.kill('SIGKILL'), 30_000);
    const code = await exited;
    clearTimeout(timer);
    return code;
  }
}

const dirs: string[] = [];
function logDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'strata-up-logs-'));
  dirs.push(dir);
  return dir;
}
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

describe('up, by default', () => {
  let up: Up;

  beforeAll(async () => {
    up = new Up(logDir(), []);
    await up.waitFor(/^Press Ctrl-C to stop/, 120_000);
  }, 130_000);

  afterAll(async () => {
    await up?.stop();
  }, 40_000);

  it('prints where each service listens and where their logs are', () => {
    expect([...up.urls.keys()].sort()).toEqual([...SERVICE_NAMES].sort());
    expect(up.lines).toContain(`  logs: ${up.logDir}/<service>.log (JSON lines); --verbose prints them here`);
  });

  it("shows a request the edge refuses as one line, and the services' JSON lines only in their files", async () => {
    const res = await fetch(`${up.urls.get('edge-gateway')}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 'many' }),
    });
    expect(res.status).toBe(400);
    const id = res.headers.get('x-request-id');
    expect(await up.waitFor(/ POST \/v1\/chat\/completions 400 /, 10_000)).toMatch(
      /^\d\d:\d\d:\d\d edge-gateway {6}POST \/v1\/chat\/completions 400 \d+ ms, STRATA_INVALID_REQUEST /,
    );
    expect(up.log('edge-gateway')).toContainEqual(
      expect.objectContaining({ request_id: id, msg: 'request completed', status: 400 }),
    );
    for (const service of SERVICE_NAMES) {
      expect(up.log(service)).toContainEqual(expect.objectContaining({ msg: 'listening', service }));
    }
    expect(up.lines.filter((l) => l.includes('{"level"'))).toEqual([]);
  });

  it.skipIf(!served.path)(
    `shows a chat completion through the edge once, from the edge, with its tokens${served.skipped}`,
    async () => {
      // The router's probe seeing the loaded model is a console line too.
      await up.waitFor(/^\d\d:\d\d:\d\d router-service {4}backend local ready$/, 240_000);
      const res = await fetch(`${up.urls.get('edge-gateway')}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4 }),
      });
      expect(res.status).toBe(200);
      const id = res.headers.get('x-request-id');
      // The backend's and router's lines usually arrive first; those parts are left out if not.
      expect(await up.waitFor(/ POST \/v1\/chat\/completions 200 /, 10_000)).toMatch(
        /^\d\d:\d\d:\d\d edge-gateway {6}POST \/v1\/chat\/completions 200 \d+ ms, (\d+ prompt \+ 4 output tokens, first token \d+ ms|\d+ tokens)(, backend local)?$/,
      );
      const direct = await fetch(`${up.urls.get('inference-backend')}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: 'Hi', max_tokens: 2 }),
      });
      expect(direct.status).toBe(200);
      expect(await up.waitFor(/ POST \/v1\/completions 200 /, 10_000)).toMatch(
        /^\d\d:\d\d:\d\d inference-backend POST \/v1\/completions 200 \d+ ms, \d+ prompt \+ 2 output tokens, first token \d+ ms$/,
      );
      // Once, though the router and the backend logged it as well.
      expect(up.lines.filter((l) => l.includes(' POST /v1/chat/completions 200 '))).toHaveLength(1);
      for (const service of ['edge-gateway', 'router-service', 'inference-backend'] as const) {
        expect(up.log(service)).toContainEqual(
          expect.objectContaining({ request_id: id, msg: 'request completed', status: 200 }),
        );
      }
    },
    260_000,
  );

  it('says when a service exits that nobody stopped', async () => {
    const banner = up.lines.find((l) => l.startsWith('  observability '));
    const pid = Number(/\(pid (\d+)\)$/.exec(banner ?? '')?.[1]);
    expect(pid).toBeGreaterThan(0);
    process.kill(pid, 'SIGKILL');
    const line = await up.waitFor(/ EXITED /, 10_000);
    expect(line).toMatch(/^\d\d:\d\d:\d\d /);
    expect(line.slice(9)).toBe(
      `observability     EXITED (killed by SIGKILL); its log: ${up.logDir}/observability.log`,
    );
  });

  it('drains and stops the other services on SIGTERM, their last lines in the files', async () => {
    expect(await up.stop()).toBe(0);
    expect(up.lines.at(-1)).toBe(`Stopped. The services' logs: ${up.logDir}`);
    expect(up.lines.filter((l) => l.includes(' EXITED '))).toHaveLength(1);
    for (const service of SERVICE_NAMES.filter((s) => s !== 'observability')) {
      expect(up.log(service)).toContainEqual(expect.objectContaining({ msg: 'shutdown: draining' }));
    }
  }, 40_000);
});

describe('up --verbose', () => {
  it('shows every raw JSON line, tagged with its service, and still writes the files', async () => {
    const up = new Up(logDir(), ['--verbose']);
    try {
      await up.waitFor(/^Press Ctrl-C to stop/, 120_000);
      for (const service of SERVICE_NAMES) {
        const tagged = up.lines.find((l) => l.startsWith(`[${service}`) && l.includes('"msg":"listening"'));
        expect(tagged).toMatch(/^\[[a-z-]+ *\] \{"level":"info",/);
        expect(up.log(service)).toContainEqual(expect.objectContaining({ msg: 'listening', service }));
      }
      expect(up.lines).toContainEqual(expect.stringMatching(/^\[edge-gateway {5}\] \{"level":"warn"/));
      expect(up.lines).toContain(`  logs: ${up.logDir}/<service>.log (JSON lines)`);
    } finally {
      expect(await up.stop()).toBe(0);
    }
  }, 180_000);
});
