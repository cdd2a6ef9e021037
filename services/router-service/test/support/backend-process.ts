// Real inference-backend processes (the built service, CPU engine, tinystories-656k) for the
// router's end-to-end tests. Model paths come from STRATA_MODELS_DIR only.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';

export interface BackendProcess {
  name: string;
  url: string;
  child: ChildProcess;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

function modelDir(): string {
  const root = process.env.STRATA_MODELS_DIR;
  if (!root)
    throw new Error('STRATA_MODELS_DIR is not set: point it at the folder holding tinystories-656k/');
  const dir = join(root, 'tinystories-656k');
  if (!existsSync(dir)) throw new Error(`tinystories-656k not found in STRATA_MODELS_DIR (${root})`);
  return dir;
}

const entry = join(dirname(createRequire(import.meta.url).resolve('@strata/inference-backend')), 'main.js');

/** Starts a backend on a free port and resolves once it is listening (not yet ready). */
export function startBackendProcess(name: string, env: Record<string, string> = {}): Promise<BackendProcess> {
  const child = spawn(process.execPath, [entry], {
    env: {
      ...process.env,
      HOST: '127.0.0.1',
      PORT: '0',
      STRATA_MODEL_DIR: modelDir(),
      STRATA_KV_CACHE_BLOCKS: '256',
      STRATA_ENGINE_THREADS: '1',
      STRATA_WARMUP: 'false',
      LOG_LEVEL: 'info', // the 'listening' line is info
      ...env,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const stop = async (signal: NodeJS.Signals = 'SIGTERM') => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill(signal);
    await exited;
  };
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL'); // never leave a process behind a failed start
      reject(new Error(`${name} did not listen within 30 s`));
    }, 30_000);
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      if (!line.includes('"listening"')) return;
      const address = (JSON.parse(line) as { address?: string }).address;
      if (!address) return;
      clearTimeout(timer);
      resolve({ name, url: address, child, stop });
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited with ${code} before listening`));
    });
  });
}

/** Waits until GET /health/ready answers 200. */
export async function waitReady(url: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const ok = await fetch(`${url}/health/ready`).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${url} not ready within ${timeoutMs} ms`);
}
