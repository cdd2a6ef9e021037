// What `up` prints instead of the services' JSON lines, from lines the services really logged
// for one chat completion through the edge and one request straight to the backend; the
// per-run log folders; Enter on a terminal.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { PassThrough } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ServiceName } from '../src/platform.js';
import { newRunLogDir, ServiceLogFiles } from '../src/run-logs.js';
import { onEnter } from '../src/up-command.js';
import {
  collectDetails,
  formatProblemLine,
  formatRequestLine,
  milestoneText,
  parseLogLine,
  type RequestDetails,
  UpConsole,
} from '../src/up-console.js';

// The clock on each line is local time; the lines below were logged at 20:19 UTC.
const tz = process.env.TZ;
beforeAll(() => {
  process.env.TZ = 'UTC';
});
afterAll(() => {
  if (tz === undefined) delete process.env.TZ;
  else process.env.TZ = tz;
});

// One POST /v1/chat/completions through the edge, in the order the launcher read the lines.
const chat: [ServiceName, string][] = [
  [
    'inference-backend',
    '{"level":"info","time":"2026-11-25T20:19:41.212Z","service":"inference-backend","request_id":"12976365-a320-4a2a-8439-f2d203442daa","tenant":"anonymous","prompt_tokens":31,"output_tokens":8,"ttft_ms":103.462,"e2e_ms":208.593,"queue_ms":0.664,"prefill_ms":102.798,"decode_ms":105.059,"finish_reason":"length","msg":"request finished"}',
  ],
  [
    'router-service',
    '{"level":"info","time":"2026-11-25T20:19:41.219Z","service":"router-service","request_id":"12976365-a320-4a2a-8439-f2d203442daa","trace_id":"1429fba64ee8d7c7e7d3974768413e25","rule":"default","pool":"local","session":null,"affinity":null,"candidates":[{"backend":"local","score":0.2857,"scores":{"queue":1,"kv":1,"prefix":0,"session":0}}],"excluded":[],"choice":"local","reason":"local score 0.286 (queue 1.000 kv 1.000 prefix 0.000 session 0.000)","attempts":[{"backend":"local","outcome":"ok","status":200,"ms":219}],"failed_after_first_byte":false,"msg":"route decision"}',
  ],
  [
    'router-service',
    '{"level":"info","time":"2026-11-25T20:19:41.219Z","service":"router-service","request_id":"12976365-a320-4a2a-8439-f2d203442daa","trace_id":"1429fba64ee8d7c7e7d3974768413e25","method":"POST","url":"/v1/chat/completions","status":200,"duration_ms":224.532733,"msg":"request completed"}',
  ],
  [
    'edge-gateway',
    '{"level":"info","time":"2026-11-25T20:19:41.220Z","service":"edge-gateway","request_id":"12976365-a320-4a2a-8439-f2d203442daa","trace_id":"1429fba64ee8d7c7e7d3974768413e25","tenant":"anonymous","outcome":"forwarded","status":200,"tokens":39,"msg":"request forwarded"}',
  ],
  [
    'inference-backend',
    '{"level":"info","time":"2026-11-25T20:19:41.220Z","service":"inference-backend","request_id":"12976365-a320-4a2a-8439-f2d203442daa","trace_id":"1429fba64ee8d7c7e7d3974768413e25","method":"POST","url":"/v1/chat/completions","status":200,"duration_ms":224.43321599999763,"msg":"request completed"}',
  ],
  [
    'edge-gateway',
    '{"level":"info","time":"2026-11-25T20:19:41.224Z","service":"edge-gateway","request_id":"12976365-a320-4a2a-8439-f2d203442daa","trace_id":"1429fba64ee8d7c7e7d3974768413e25","method":"POST","url":"/v1/chat/completions","status":200,"duration_ms":232.12920300000405,"msg":"request completed"}',
  ],
];
const chatLine =
  '20:19:41 edge-gateway POST /v1/chat/completions 200 232 ms, 31 prompt + 8 output tokens, first token 103 ms, backend local';

// A POST /v1/completions sent straight to the backend, naming a model it does not serve.
const direct: [ServiceName, string][] = [
  [
    'inference-backend',
    '{"level":"info","time":"2026-11-25T20:19:37.545Z","service":"inference-backend","request_id":"ae29053d-bb53-444b-93b4-14bbdd7e052d","code":"STRATA_MODEL_NOT_FOUND","message":"model \\"x\\" is not served here; this backend serves \\"SmolLM2-135M-Instruct.Q4_1\\"","msg":"request rejected"}',
  ],
  [
    'inference-backend',
    '{"level":"info","time":"2026-11-25T20:19:37.549Z","service":"inference-backend","request_id":"ae29053d-bb53-444b-93b4-14bbdd7e052d","method":"POST","url":"/v1/completions","status":404,"duration_ms":9.10173599999689,"msg":"request completed"}',
  ],
];

const authOff =
  '{"level":"warn","time":"2026-11-25T20:18:48.213Z","service":"edge-gateway","msg":"no tenants file (STRATA_EDGE_TENANTS_FILE): auth is OFF, every request is tenant \\"anonymous\\""}';
const modelFailed =
  '{"level":"error","time":"2026-11-25T20:26:29.401Z","service":"inference-backend","err":{"type":"EngineError","message":"the engine was closed while the request ran","stack":"EngineError: the engine was closed while the request ran\\n    at Engine.close (file:///app/services/inference-backend/dist/engine/engine.js:116:23)","code":"STRATA_ENGINE_CLOSED","statusCode":503,"name":"EngineError"},"msg":"model failed to load"}';
const modelLoaded =
  '{"level":"info","time":"2026-11-25T20:18:52.508Z","service":"inference-backend","model":"SmolLM2-135M-Instruct.Q4_1","format":"gguf","quantization":"Q4_1","load_seconds":6.16680294,"backend":"cpu","msg":"model loaded"}';
const warmupDone =
  '{"level":"info","time":"2026-11-25T20:19:06.411Z","service":"inference-backend","warmup":{"requests":23,"seconds":13.902760682},"prompt_lengths":[8,64,512],"msg":"warmup done"}';
const backendReady =
  '{"level":"info","time":"2026-11-25T20:19:06.601Z","service":"router-service","backend":"local","ready":true,"msg":"backend ready"}';

function record(line: string) {
  const parsed = parseLogLine(line);
  if (!parsed) throw new Error(`not a log line: ${line}`);
  return parsed;
}

function collect(into: UpConsole, lines: [ServiceName, string][]) {
  for (const [service, line] of lines) into.line(service, line);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('request lines', () => {
  it("formats the edge's completion with what the backend and router logged about it", () => {
    const details: RequestDetails = {};
    for (const [, line] of chat.slice(0, 4)) collectDetails(record(line), details);
    expect(formatRequestLine('edge-gateway', record(chat[5]?.[1] ?? ''), details)).toBe(chatLine);
  });

  it('falls back to the tokens the edge charged, and says nothing it does not know', () => {
    const completed = record(chat[5]?.[1] ?? '');
    expect(formatRequestLine('edge-gateway', completed, { tokens: 39 })).toBe(
      '20:19:41 edge-gateway POST /v1/chat/completions 200 232 ms, 39 tokens',
    );
    expect(formatRequestLine('edge-gateway', completed)).toBe(
      '20:19:41 edge-gateway POST /v1/chat/completions 200 232 ms',
    );
  });

  it('prints one line per request through the edge, from the edge, whatever order the lines come in', async () => {
    for (const order of [chat, [...chat].reverse(), [chat[5], ...chat.slice(0, 5)]] as [
      ServiceName,
      string,
    ][][]) {
      const out: string[] = [];
      const view = new UpConsole({ write: (t) => out.push(t), holdMs: 20 });
      collect(view, order);
      await sleep(60);
      expect(out).toHaveLength(1);
      expect(out[0]).toMatch(/^20:19:41 edge-gateway POST \/v1\/chat\/completions 200 232 ms/);
    }
    const out: string[] = [];
    collect(new UpConsole({ write: (t) => out.push(t), holdMs: 20, width: 17 }), chat);
    await sleep(60);
    expect(out).toEqual([`${chatLine.replace('edge-gateway ', 'edge-gateway      ')}\n`]);
  });

  it('prints a request sent straight to the backend once the wait for an outer line is over', async () => {
    const out: string[] = [];
    collect(new UpConsole({ write: (t) => out.push(t), holdMs: 50 }), direct);
    expect(out).toEqual([]);
    await sleep(120);
    expect(out).toEqual([
      '20:19:37 inference-backend POST /v1/completions 404 9 ms, STRATA_MODEL_NOT_FOUND model "x" is not served here; this backend serves "SmolLM2-135M-Instruct.Q4_1"\n',
    ]);
  });

  it('prints held lines at once on flush', () => {
    const out: string[] = [];
    const view = new UpConsole({ write: (t) => out.push(t), holdMs: 60_000 });
    collect(view, direct);
    view.flush();
    expect(out).toHaveLength(1);
    expect(out[0]).toContain('inference-backend POST /v1/completions 404');
  });

  it('prints no request lines with requests off, but still the warnings', async () => {
    const out: string[] = [];
    const view = new UpConsole({ write: (t) => out.push(t), requests: false, holdMs: 10 });
    collect(view, [...chat, ...direct, ['edge-gateway', authOff]]);
    await sleep(40);
    expect(out).toEqual([
      '20:18:48 edge-gateway WARN no tenants file (STRATA_EDGE_TENANTS_FILE): auth is OFF, every request is tenant "anonymous"\n',
    ]);
  });
});

describe('other lines', () => {
  it('prints warnings and errors in one line, the error by its message and the other fields as k=v', () => {
    expect(formatProblemLine('inference-backend', record(modelFailed))).toBe(
      '20:26:29 inference-backend ERROR model failed to load: the engine was closed while the request ran',
    );
    const ejected = record(
      '{"level":"warn","time":"2026-11-25T20:30:00.000Z","service":"router-service","backend":"local","source":"probe","backoff_ms":1000,"ejection":1,"msg":"backend ejected after failures"}',
    );
    expect(formatProblemLine('router-service', ejected)).toBe(
      '20:30:00 router-service WARN backend ejected after failures (backend=local source=probe backoff_ms=1000 ejection=1)',
    );
  });

  it('prints the model loading, warming up and the router seeing the backend ready', () => {
    const out: string[] = [];
    const view = new UpConsole({ write: (t) => out.push(t) });
    view.line('inference-backend', modelLoaded);
    view.line('inference-backend', warmupDone);
    view.line('router-service', backendReady);
    expect(out).toEqual([
      '20:18:52 inference-backend model SmolLM2-135M-Instruct.Q4_1 loaded in 6.2 s\n',
      '20:19:06 inference-backend warmup done: 23 requests in 13.9 s\n',
      '20:19:06 router-service backend local ready\n',
    ]);
    expect(milestoneText(record(chat[1]?.[1] ?? ''))).toBeUndefined();
  });

  it('prints what is not a log line as it is, and an exit nobody asked for', () => {
    const out: string[] = [];
    const view = new UpConsole({ write: (t) => out.push(t) });
    view.line('inference-backend', 'Error: boom');
    view.line('inference-backend', '    at main (file:///x.js:1:1)');
    view.exited('inference-backend', 1, null, 'logs/inference-backend.log');
    view.exited('router-service', null, 'SIGKILL', 'logs/router-service.log');
    expect(out).toEqual([
      expect.stringMatching(/^\d\d:\d\d:\d\d inference-backend \| Error: boom\n$/),
      expect.stringMatching(/^\d\d:\d\d:\d\d inference-backend \| {5}at main \(file:\/\/\/x\.js:1:1\)\n$/),
      expect.stringMatching(
        /^\d\d:\d\d:\d\d inference-backend EXITED \(exit code 1\); its log: logs\/inference-backend\.log\n$/,
      ),
      expect.stringMatching(
        /^\d\d:\d\d:\d\d router-service EXITED \(killed by SIGKILL\); its log: logs\/router-service\.log\n$/,
      ),
    ]);
  });
});

describe('run folders', () => {
  let root: string;
  beforeAll(() => {
    root = mkdtempSync(join(tmpdir(), 'strata-runs-'));
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('makes <time>/logs, a second one in the same second beside it, and keeps only the newest runs', () => {
    const runs = join(root, 'run');
    const at = (s: number) => new Date(2026, 10, 25, 20, 0, s);
    const first = newRunLogDir(runs, at(0), 3);
    expect(first).toBe(join(runs, '2026-11-25_20-00-00', 'logs'));
    expect(newRunLogDir(runs, at(0), 3)).toBe(join(runs, '2026-11-25_20-00-00-2', 'logs'));
    mkdirSync(join(runs, 'not-a-run'));
    for (const s of [1, 2, 3]) newRunLogDir(runs, at(s), 3);
    expect(readdirSync(runs).sort()).toEqual([
      '2026-11-25_20-00-01',
      '2026-11-25_20-00-02',
      '2026-11-25_20-00-03',
      'not-a-run',
    ]);
    expect(existsSync(first)).toBe(false);
  });

  it('appends each line to its service file', () => {
    const files = new ServiceLogFiles(join(root, 'logs'), ['edge-gateway', 'router-service'] as const);
    files.write('edge-gateway', '{"a":1}');
    files.write('edge-gateway', '{"a":2}');
    files.close();
    expect(readFileSync(join(root, 'logs', 'edge-gateway.log'), 'utf8')).toBe('{"a":1}\n{"a":2}\n');
    expect(readFileSync(join(root, 'logs', 'router-service.log'), 'utf8')).toBe('');
  });
});

describe('Enter on the terminal', () => {
  const terminal = () => Object.assign(new PassThrough(), { isTTY: true });

  it('calls back for each line typed on a terminal in the foreground', async () => {
    const input = terminal();
    let calls = 0;
    const keys = onEnter(input, () => calls++, true);
    expect(keys).toBeDefined();
    input.write('\n');
    input.write('u\n');
    await sleep(10);
    expect(calls).toBe(2);
    input.end(); // stdin closed (Ctrl-D): no more calls, nothing thrown
    await sleep(10);
    keys?.close();
    expect(calls).toBe(2);
  });

  it('leaves a pipe, and a terminal it is not the foreground of, unread', () => {
    const pipe = new PassThrough();
    expect(onEnter(pipe, () => {}, true)).toBeUndefined();
    expect(pipe.listenerCount('data')).toBe(0);
    const background = terminal();
    expect(onEnter(background, () => {}, false)).toBeUndefined();
    expect(background.listenerCount('data')).toBe(0);
  });

  // inForeground reads /proc/self/stat: the foreground of a terminal (script's pty) or not (setsid:
  // no terminal at all).
  const upCommand = join(dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'up-command.js');
  const probe = `import(${JSON.stringify(upCommand)}).then((m) => console.log(String(m.inForeground())))`;
  const hasScript = spawnSync('script', ['--version']).status === 0;

  it.runIf(process.platform === 'linux' && hasScript)(
    'knows whether it is the foreground of its terminal',
    () => {
      const inPty = spawnSync('script', ['-qec', `${process.execPath} -e '${probe}'`, '/dev/null'], {
        encoding: 'utf8',
      });
      expect(inPty.stdout.trim()).toBe('true');
      const detached = spawnSync('setsid', [process.execPath, '-e', probe], { encoding: 'utf8' });
      expect(detached.stdout.trim()).toBe('false');
    },
  );
});
