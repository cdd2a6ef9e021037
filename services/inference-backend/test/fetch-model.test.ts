// strata-fetch-model (dist/cli/fetch-model.js) as a process, the way the chart's init container
// runs it. S3: against moto's S3 server (PyPI moto[server], installed once into .toolchain/ by
// scripts/ensure-moto.sh), a real S3 API spoken to by the real AWS SDK. Hugging Face: the hub
// cannot be reached from CI, so a local HTTP server on port 0 answers with the hub's API shapes
// (revision -> commit, recursive tree with lfs.oid, resolve with Range) - the same requests
// huggingface.co gets.
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { type AddressInfo, createServer as createTcpServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { CreateBucketCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { included, parseSourceUri } from '../src/cli/model-fetch/source.js';

const root = join(import.meta.dirname, '..');
const CLI = join(root, 'dist', 'cli', 'fetch-model.js');
type Line = Record<string, unknown> & { msg: string; level: string };

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const gitSha1 = (b: Buffer) => createHash('sha1').update(`blob ${b.length}\0`).update(b).digest('hex');

interface Run {
  child: ChildProcess;
  lines: Line[];
  stderr: () => string;
  exited: Promise<number | null>;
  /** Resolves with the first log line that matches. */
  waitFor(pred: (l: Line) => boolean, timeoutMs?: number): Promise<Line>;
}

function startCli(args: string[], env: Record<string, string | undefined>): Run {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: env as NodeJS.ProcessEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: Line[] = [];
  const waiters: { pred: (l: Line) => boolean; resolve: (l: Line) => void }[] = [];
  let partial = '';
  let err = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    const parts = (partial + chunk.toString('utf8')).split('\n');
    partial = parts.pop() ?? '';
    for (const text of parts) {
      if (text === '') continue;
      const line = JSON.parse(text) as Line;
      lines.push(line);
      for (const w of [...waiters]) if (w.pred(line)) w.resolve(line);
    }
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    err += chunk.toString('utf8');
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return {
    child,
    lines,
    stderr: () => err,
    exited,
    waitFor(pred, timeoutMs = 20_000) {
      const seen = lines.find(pred);
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`no such log line in ${timeoutMs} ms; got ${JSON.stringify(lines)}`)),
          timeoutMs,
        );
        waiters.push({
          pred,
          resolve: (l) => {
            clearTimeout(timer);
            resolve(l);
          },
        });
      });
    },
  };
}

async function runCli(args: string[], env: Record<string, string | undefined>) {
  const run = startCli(args, env);
  const code = await run.exited;
  return { code, lines: run.lines, stderr: run.stderr() };
}

const failure = (lines: Line[]) => lines.find((l) => l.level === 'error');

async function freePort(): Promise<number> {
  const srv = createTcpServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address() as AddressInfo;
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

let work: string;
beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), 'strata-fetch-'));
});
afterAll(() => {
  rmSync(work, { recursive: true, force: true });
});
let n = 0;
const freshDest = () => join(work, `dest-${n++}`, 'model');

describe('model source URIs', () => {
  it('parses s3 and hf URIs and refuses anything else with the reason', () => {
    expect(parseSourceUri('s3://models/llama/8b')).toEqual({
      kind: 's3',
      bucket: 'models',
      prefix: 'llama/8b/',
      uri: 's3://models/llama/8b/',
    });
    expect(parseSourceUri('hf://meta-llama/Llama-3.1-8B@a1b2c3')).toMatchObject({
      repo: 'meta-llama/Llama-3.1-8B',
      revision: 'a1b2c3',
    });
    expect(parseSourceUri('hf://gpt2')).toMatchObject({ repo: 'gpt2', revision: 'main' });
    expect(() => parseSourceUri('ftp://x/y')).toThrow(/unsupported scheme "ftp:"/);
    expect(() => parseSourceUri('s3://Bad_Bucket/x')).toThrow(/not an S3 bucket name/);
    expect(() => parseSourceUri('hf://a/b/c')).toThrow(/not a Hugging Face repository id/);
    expect(() => parseSourceUri('/models/llama')).toThrow(/use s3:\/\/bucket\/prefix/);
  });

  it('matches include globs on file names, or on paths when the pattern has a slash', () => {
    expect(included('sub/model-00001-of-00002.safetensors', ['*.safetensors'])).toBe(true);
    expect(included('README.md', ['*.json', '*.safetensors'])).toBe(false);
    expect(included('onnx/model.onnx', ['onnx/*'])).toBe(true);
    expect(included('other/model.onnx', ['onnx/*'])).toBe(false);
  });
});

describe('strata-fetch-model from S3 (moto server)', () => {
  let moto: ChildProcess | undefined;
  let endpoint: string;
  let s3: S3Client;
  let env: Record<string, string | undefined>;
  const big = randomBytes(8_000_000);
  const weights = randomBytes(3_000_000);
  const config = Buffer.from('{"vocab_size": 512}\n');
  const tokenizer = Buffer.from('{"model": {"type": "BPE"}}\n');

  const put = (Key: string, Body: Buffer | string, checksum = false) =>
    s3.send(
      new PutObjectCommand({
        Bucket: 'models',
        Key,
        Body,
        ...(checksum ? { ChecksumAlgorithm: 'SHA256' } : {}),
      }),
    );

  beforeAll(async () => {
    const bin = (
      await promisify(execFile)('bash', [join(root, 'scripts', 'ensure-moto.sh')], { timeout: 600_000 })
    ).stdout.trim();
    const port = await freePort();
    endpoint = `http://127.0.0.1:${port}`;
    moto = spawn(bin, ['-H', '127.0.0.1', '-p', String(port)], { stdio: 'ignore' });
    for (let i = 0; ; i++) {
      if (
        await fetch(endpoint).then(
          (r) => r.ok,
          () => false,
        )
      )
        break;
      if (i > 150) throw new Error('moto_server did not start');
      await new Promise((r) => setTimeout(r, 200));
    }
    env = {
      PATH: process.env.PATH,
      HOME: work,
      AWS_ACCESS_KEY_ID: 'testing',
      AWS_SECRET_ACCESS_KEY: 'testing',
      AWS_REGION: 'us-east-1',
      AWS_ENDPOINT_URL_S3: endpoint,
      AWS_EC2_METADATA_DISABLED: 'true',
      AWS_CONFIG_FILE: join(work, 'no-aws-config'),
      AWS_SHARED_CREDENTIALS_FILE: join(work, 'no-aws-credentials'),
      STRATA_S3_FORCE_PATH_STYLE: 'true',
    };
    s3 = new S3Client({
      endpoint,
      region: 'us-east-1',
      forcePathStyle: true,
      credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
    });
    await s3.send(new CreateBucketCommand({ Bucket: 'models' }));
    // m1: the weights carry S3's own SHA-256, config.json is in a SHA256SUMS manifest,
    // sub/tokenizer.json has no checksum, README.md is not a model file.
    await put('m1/model.safetensors', weights, true);
    await put('m1/config.json', config);
    await put('m1/sub/tokenizer.json', tokenizer);
    await put('m1/README.md', 'not fetched');
    await put('m1/SHA256SUMS', `${sha256(config)}  config.json\n`);
    // big: 8 MB for the rate-limited runs (kill and resume, two downloaders).
    await put('big/model.safetensors', big, true);
    // bad: a manifest that disagrees with the bytes.
    await put('bad/model.safetensors', weights);
    await put('bad/SHA256SUMS', `${sha256(Buffer.from('something else'))}  model.safetensors\n`);
  }, 660_000);

  afterAll(() => {
    moto?.kill('SIGTERM');
  });

  it('downloads the included files, verifies each, writes the marker; the next run finds it present', async () => {
    const dest = freshDest();
    const first = await runCli(['--source', 's3://models/m1', '--dest', dest], env);
    expect(first.code, JSON.stringify(first.lines)).toBe(0);
    expect(readFileSync(join(dest, 'model.safetensors')).equals(weights)).toBe(true);
    expect(readFileSync(join(dest, 'config.json')).equals(config)).toBe(true);
    expect(readFileSync(join(dest, 'sub', 'tokenizer.json')).equals(tokenizer)).toBe(true);
    expect(existsSync(join(dest, 'README.md'))).toBe(false);
    expect(existsSync(join(dest, 'SHA256SUMS'))).toBe(false);
    const verified = Object.fromEntries(
      first.lines.filter((l) => l.msg === 'file verified').map((l) => [l.file, l.checksum]),
    );
    expect(verified).toEqual({
      'model.safetensors': 'sha256 (ChecksumSHA256)',
      'config.json': 'sha256 (SHA256SUMS)',
      'sub/tokenizer.json': 'none',
    });
    expect(first.lines.find((l) => l.level === 'warn')?.file).toBe('sub/tokenizer.json');
    const done = first.lines.find((l) => l.msg === 'model fetched');
    expect(done).toMatchObject({
      files: 3,
      bytes: weights.length + config.length + tokenizer.length,
      transferred_bytes: weights.length + config.length + tokenizer.length,
    });
    const marker = JSON.parse(readFileSync(join(dest, '.strata-complete'), 'utf8'));
    expect(marker.source).toBe('s3://models/m1/');
    expect(marker.files.find((f: { path: string }) => f.path === 'model.safetensors').digest.hex).toBe(
      sha256(weights),
    );
    // The lock and the work area are gone.
    expect(existsSync(join(dest, '.strata-fetch.lock'))).toBe(false);
    expect(existsSync(join(dest, '.strata-fetch'))).toBe(false);

    const second = await runCli(['--source', 's3://models/m1', '--dest', dest], env);
    expect(second.code).toBe(0);
    expect(second.lines.map((l) => l.msg)).toEqual(['model present in the cache']);
  });

  it('with --require-checksum, refuses a file the source has no checksum for', async () => {
    const dest = freshDest();
    const r = await runCli(['--source', 's3://models/m1', '--dest', dest, '--require-checksum'], env);
    expect(r.code).toBe(1);
    expect(failure(r.lines)?.msg).toMatch(/no checksum for sub\/tokenizer\.json/);
    expect(existsSync(join(dest, '.strata-complete'))).toBe(false);
  });

  it('logs progress; a killed download leaves only a partial file, and the next one takes the stale lock and resumes', async () => {
    const dest = freshDest();
    const slow = startCli(
      ['--source', 's3://models/big', '--dest', dest, '--max-mb-per-s', '4', '--progress-interval-s', '0.3'],
      env,
    );
    const p1 = await slow.waitFor((l) => l.msg === 'download progress' && Number(l.bytes) > 0);
    const p2 = await slow.waitFor((l) => l.msg === 'download progress' && Number(l.bytes) > Number(p1.bytes));
    expect(p2).toMatchObject({ total_bytes: big.length, files_total: 1, files_done: 0 });
    expect(Number(p2.percent)).toBeGreaterThan(0);
    expect(Number(p2.percent)).toBeLessThan(100);
    expect(Number(p2.mb_per_s)).toBeGreaterThan(0);
    slow.child.kill('SIGKILL');
    await slow.exited;

    // Nothing under the final name, no marker; the partial file and the dead process's lock remain.
    const part = join(dest, '.strata-fetch', 'partial', 'model.safetensors.part');
    expect(existsSync(join(dest, 'model.safetensors'))).toBe(false);
    expect(existsSync(join(dest, '.strata-complete'))).toBe(false);
    expect(existsSync(join(dest, '.strata-fetch.lock'))).toBe(true);
    const partial = statSync(part).size;
    expect(partial).toBeGreaterThan(0);
    expect(partial).toBeLessThan(big.length);

    const resumed = await runCli(['--source', 's3://models/big', '--dest', dest, '--stale-lock-s', '1'], env);
    expect(resumed.code, JSON.stringify(resumed.lines)).toBe(0);
    // The lock it took over is the killed process's (holder "<host>:<pid>").
    const took = resumed.lines.find((l) => l.msg === 'took over a stale download lock');
    expect(String(took?.holder)).toMatch(new RegExp(`:${slow.child.pid}$`));
    const resume = resumed.lines.find((l) => l.msg === 'resuming a partial download');
    expect(Number(resume?.offset)).toBeGreaterThanOrEqual(partial);
    const done = resumed.lines.find((l) => l.msg === 'model fetched');
    expect(Number(done?.transferred_bytes)).toBe(big.length - Number(resume?.offset));
    expect(sha256(readFileSync(join(dest, 'model.safetensors')))).toBe(sha256(big));
    expect(existsSync(join(dest, '.strata-fetch'))).toBe(false);
  });

  it('two downloaders into one cache: one downloads, the other waits and reuses its files', async () => {
    const dest = freshDest();
    const args = ['--source', 's3://models/big', '--dest', dest];
    // 2 MB/s: a holds the lock for about 4 s, time enough for b's process to start on a busy
    // 2-core machine (at 8 MB/s, 1 s, b once found the model already fetched).
    const a = startCli([...args, '--max-mb-per-s', '2'], env);
    await a.waitFor((l) => l.msg === 'downloading the model');
    const b = startCli(args, env);
    const [codeA, codeB] = await Promise.all([a.exited, b.exited]);
    expect([codeA, codeB]).toEqual([0, 0]);
    expect(a.lines.find((l) => l.msg === 'model fetched')?.transferred_bytes).toBe(big.length);
    expect(b.lines.map((l) => l.msg)).toEqual([
      'another downloader holds the lock; waiting for it',
      'model fetched by another downloader; reusing it',
    ]);
    expect(b.lines[1]).toMatchObject({ outcome: 'reused', bytes: big.length });
    expect(b.lines[0]?.holder).toBe(
      JSON.parse(readFileSync(join(dest, '.strata-complete'), 'utf8')).fetched_by,
    );
    expect(sha256(readFileSync(join(dest, 'model.safetensors')))).toBe(sha256(big));
  }, 60_000);

  it('fails on a checksum mismatch, says so, and removes the file', async () => {
    const dest = freshDest();
    const r = await runCli(['--source', 's3://models/bad', '--dest', dest], env);
    expect(r.code).toBe(1);
    const err = failure(r.lines);
    expect(err?.code).toBe('STRATA_FETCH_CHECKSUM');
    expect(err?.msg).toMatch(
      /checksum mismatch for model\.safetensors .*expected sha256 [0-9a-f]{64} \(SHA256SUMS\), got [0-9a-f]{64}; the downloaded file was removed/,
    );
    expect(existsSync(join(dest, 'model.safetensors'))).toBe(false);
    expect(existsSync(join(dest, '.strata-fetch', 'partial', 'model.safetensors.part'))).toBe(false);
    expect(existsSync(join(dest, '.strata-complete'))).toBe(false);
    expect(existsSync(join(dest, '.strata-fetch.lock'))).toBe(false);
  });

  it('says what is missing: an empty prefix, a bucket that does not exist', async () => {
    const empty = await runCli(['--source', 's3://models/nothing-here', '--dest', freshDest()], env);
    expect(empty.code).toBe(1);
    expect(failure(empty.lines)).toMatchObject({ code: 'STRATA_FETCH_NOT_FOUND' });
    expect(failure(empty.lines)?.msg).toMatch(/no objects under s3:\/\/models\/nothing-here\//);
    const bucket = await runCli(['--source', 's3://no-such-bucket/m1', '--dest', freshDest()], env);
    expect(bucket.code).toBe(1);
    expect(failure(bucket.lines)?.msg).toMatch(/s3:\/\/no-such-bucket\/m1\/: the bucket does not exist/);
  });

  it('without AWS credentials, says how a pod gets them (IRSA)', async () => {
    const { AWS_ACCESS_KEY_ID: _a, AWS_SECRET_ACCESS_KEY: _s, ...bare } = env;
    const r = await runCli(['--source', 's3://models/m1', '--dest', freshDest()], bare);
    expect(r.code).toBe(1);
    expect(failure(r.lines)).toMatchObject({ code: 'STRATA_FETCH_AUTH' });
    expect(failure(r.lines)?.msg).toMatch(/no AWS credentials .*eks\.amazonaws\.com\/role-arn/);
  });

  it('refuses a bad URI or bad options with exit 2 and the usage', async () => {
    for (const source of ['ftp://models/m1', 's3://', 'hf://a/b/c', 'models/m1']) {
      const r = await runCli(['--source', source, '--dest', freshDest()], env);
      expect(r.code, source).toBe(2);
      expect(r.stderr).toMatch(/bad model source/);
      expect(r.stderr).toMatch(/usage: strata-fetch-model/);
    }
    const r = await runCli(['--source', 's3://models/m1', '--dest', freshDest(), '--concurrency', '0'], env);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--concurrency must be a positive integer/);
  });
});

describe('strata-fetch-model from a Hugging Face hub (local server with the hub API)', () => {
  const COMMIT = 'c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00';
  const weights = randomBytes(2_000_000);
  const config = Buffer.from('{"vocab_size": 512}\n');
  const readme = Buffer.from('# tiny\n');
  const requests: { url: string; auth: string | undefined; range: string | undefined }[] = [];
  let server: Server;
  let endpoint: string;

  // Repositories: org/tiny (public), org/gated (needs the token), org/corrupt (wrong lfs oid).
  const tree = (lfsOid: string) => [
    { type: 'file', path: 'config.json', size: config.length, oid: gitSha1(config) },
    { type: 'file', path: 'README.md', size: readme.length, oid: gitSha1(readme) },
    { type: 'directory', path: 'onnx', size: 0, oid: '0'.repeat(40) },
    {
      type: 'file',
      path: 'model.safetensors',
      size: weights.length,
      oid: 'f'.repeat(40),
      lfs: { oid: lfsOid, size: weights.length, pointerSize: 134 },
    },
  ];
  const files: Record<string, Buffer> = {
    'config.json': config,
    'README.md': readme,
    'model.safetensors': weights,
  };

  function handle(req: IncomingMessage, res: ServerResponse) {
    const url = new URL(req.url ?? '/', endpoint);
    requests.push({
      url: url.pathname + url.search,
      auth: req.headers.authorization,
      range: req.headers.range,
    });
    const m = /^\/(?:api\/models\/)?(org\/[a-z]+)\/(.*)$/.exec(url.pathname);
    const repo = m?.[1];
    const rest = m?.[2] ?? '';
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (!repo || !['org/tiny', 'org/gated', 'org/corrupt'].includes(repo))
      return send(401, { error: 'Repository Not Found' });
    if (repo === 'org/gated' && req.headers.authorization !== 'Bearer hf_secret')
      return send(401, { error: 'Access to model org/gated is restricted.' });
    if (url.pathname.startsWith('/api/models/')) {
      if (rest === 'revision/main') return send(200, { id: repo, sha: COMMIT });
      if (rest === `tree/${COMMIT}` && url.searchParams.get('recursive') === 'true')
        return send(200, tree(repo === 'org/corrupt' ? sha256(Buffer.from('other')) : sha256(weights)));
      return send(404, { error: 'Revision Not Found' });
    }
    const resolve = new RegExp(`^resolve/${COMMIT}/(.+)$`).exec(rest);
    const body = resolve ? files[resolve[1] as string] : undefined;
    if (!body) return send(404, { error: 'Entry not found' });
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    const from = range ? Number(range[1]) : 0;
    res.writeHead(range ? 206 : 200, { 'content-length': String(body.length - from) });
    res.end(body.subarray(from));
  }

  beforeAll(async () => {
    server = createServer(handle);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise((resolve) => server.close(resolve)));

  const hfEnv = (token?: string) => ({
    PATH: process.env.PATH,
    HOME: work,
    HF_ENDPOINT: endpoint,
    ...(token ? { HF_TOKEN: token } : {}),
  });

  it('downloads one commit with the token, checking LFS files by sha256 and small files by git blob id', async () => {
    requests.length = 0;
    const dest = freshDest();
    const r = await runCli(['--source', 'hf://org/gated', '--dest', dest], hfEnv('hf_secret'));
    expect(r.code, JSON.stringify(r.lines)).toBe(0);
    expect(readFileSync(join(dest, 'model.safetensors')).equals(weights)).toBe(true);
    expect(readFileSync(join(dest, 'config.json')).equals(config)).toBe(true);
    expect(existsSync(join(dest, 'README.md'))).toBe(false);
    const verified = Object.fromEntries(
      r.lines.filter((l) => l.msg === 'file verified').map((l) => [l.file, l.checksum]),
    );
    expect(verified).toEqual({ 'model.safetensors': 'sha256 (lfs)', 'config.json': 'git-sha1 (git)' });
    expect(r.lines.find((l) => l.msg === 'model fetched')?.revision).toBe(COMMIT);
    // Files are read at the commit the revision named, every request with the token.
    expect(requests.map((q) => q.url).sort()).toEqual(
      [
        '/api/models/org/gated/revision/main',
        `/api/models/org/gated/tree/${COMMIT}?recursive=true`,
        `/org/gated/resolve/${COMMIT}/config.json`,
        `/org/gated/resolve/${COMMIT}/model.safetensors`,
      ].sort(),
    );
    expect(new Set(requests.map((q) => q.auth))).toEqual(new Set(['Bearer hf_secret']));
  });

  it('without the token, a gated repository is an auth failure that names HF_TOKEN', async () => {
    const r = await runCli(['--source', 'hf://org/gated', '--dest', freshDest()], hfEnv());
    expect(r.code).toBe(1);
    expect(failure(r.lines)).toMatchObject({ code: 'STRATA_FETCH_AUTH' });
    expect(failure(r.lines)?.msg).toMatch(/answered 401: .*set HF_TOKEN/);
  });

  it('a revision the hub does not know is not found', async () => {
    const r = await runCli(['--source', 'hf://org/tiny@v9', '--dest', freshDest()], hfEnv());
    expect(r.code).toBe(1);
    expect(failure(r.lines)).toMatchObject({ code: 'STRATA_FETCH_NOT_FOUND' });
  });

  it('resumes a partial file with a Range request and rejects bytes that do not match the LFS sha256', async () => {
    const dest = freshDest();
    const slow = startCli(
      [
        '--source',
        'hf://org/tiny',
        '--dest',
        dest,
        '--max-mb-per-s',
        '1',
        '--progress-interval-s',
        '0.2',
        '--concurrency',
        '1',
      ],
      hfEnv(),
    );
    await slow.waitFor((l) => l.msg === 'download progress' && Number(l.bytes) > 0);
    slow.child.kill('SIGKILL');
    await slow.exited;
    requests.length = 0;
    const ok = await runCli(['--source', 'hf://org/tiny', '--dest', dest, '--stale-lock-s', '0.5'], hfEnv());
    expect(ok.code, JSON.stringify(ok.lines)).toBe(0);
    const offset = Number(ok.lines.find((l) => l.msg === 'resuming a partial download')?.offset);
    expect(offset).toBeGreaterThan(0);
    expect(requests.find((q) => q.url.endsWith('/model.safetensors'))?.range).toBe(`bytes=${offset}-`);
    expect(readFileSync(join(dest, 'model.safetensors')).equals(weights)).toBe(true);

    requests.length = 0;
    const bad = freshDest();
    const r = await runCli(['--source', 'hf://org/corrupt', '--dest', bad], hfEnv());
    expect(r.code).toBe(1);
    expect(failure(r.lines)?.msg).toMatch(
      /checksum mismatch for model\.safetensors from hf:\/\/org\/corrupt@main: expected sha256 .* \(lfs\)/,
    );
    expect(existsSync(join(bad, 'model.safetensors'))).toBe(false);
    // config.json was verified and kept; the run after a fix skips it.
    expect(existsSync(join(bad, 'config.json'))).toBe(true);
    expect(existsSync(join(bad, '.strata-complete'))).toBe(false);
  });
});
