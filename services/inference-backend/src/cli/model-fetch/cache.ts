// Fetches a model into a cache directory at most once, however many pods start on it at the same
// time (the chart's node-local cache is one hostPath per node, shared by every backend pod there).
//
// Layout inside the model directory DEST:
//   .strata-complete        the completion marker (JSON: source, revision, files); written last
//   .strata-fetch.lock      the download lock: created with O_EXCL, its mtime a heartbeat
//   .strata-fetch/          work area: partial files (*.part) and a journal of verified files;
//                           removed once the marker is written
// The rules:
//   - one downloader holds the lock; the others wait, polling, and reuse its result when the
//     marker appears (or take the lock if the holder gave up without one);
//   - a lock whose heartbeat is older than the stale time belongs to a dead downloader (a pod
//     killed mid-download): a waiter takes it over and resumes from the partial files;
//   - a file reaches its final name only by rename after its size and checksum are verified, so a
//     half file is never visible under a name the engine reads; a checksum mismatch removes it;
//   - progress goes to the log every few seconds: bytes, percent, MB/s.
import { createHash, type Hash, randomUUID } from 'node:crypto';
import { createReadStream } from 'node:fs';
import {
  link,
  mkdir,
  open,
  readFile,
  rename,
  rm,
  stat,
  truncate,
  unlink,
  utimes,
  writeFile,
} from 'node:fs/promises';
import { hostname } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '@strata/common';
import { type Digest, FetchError, type ModelSource, type RemoteFile } from './source.js';

export const MARKER = '.strata-complete';
export const LOCK = '.strata-fetch.lock';
export const WORK_DIR = '.strata-fetch';

export interface FetchOptions {
  source: ModelSource;
  dest: string;
  include: readonly string[];
  logger: Logger;
  /** A lock not touched for this long is a dead downloader's (default 60 s). */
  staleLockMs?: number;
  /** How often the holder touches the lock (default a quarter of the stale time). */
  heartbeatMs?: number;
  /** How often a waiter looks at the lock and the marker (default 2 s). */
  pollMs?: number;
  /** How long a waiter waits for another downloader before failing (default 2 h). */
  waitTimeoutMs?: number;
  /** How often progress is logged (default 5 s). */
  progressIntervalMs?: number;
  /** Files downloaded at the same time (default 4). */
  concurrency?: number;
  /** Cap on the download rate, bytes per second (default none). */
  maxBytesPerSecond?: number;
  /** Refuse files the source gives no checksum for (default: verify their size only). */
  requireChecksum?: boolean;
}

export interface Marker {
  source: string;
  revision: string;
  files: { path: string; size: number; digest?: Digest }[];
  completed_at: string;
  fetched_by: string;
}

export interface FetchResult {
  /** present: the marker was there; reused: another downloader fetched it while this one waited. */
  outcome: 'present' | 'downloaded' | 'reused';
  files: number;
  bytes: number;
  /** Bytes this process transferred (0 unless downloaded; less than bytes when it resumed). */
  transferredBytes: number;
  seconds: number;
}

interface LockInfo {
  token: string;
  holder: string;
  started: string;
}

const MB = 1e6;
const round = (x: number, digits = 1) => Math.round(x * 10 ** digits) / 10 ** digits;
const errno = (err: unknown) => (err as NodeJS.ErrnoException).code;

async function readMarker(dest: string): Promise<Marker | undefined> {
  try {
    return JSON.parse(await readFile(join(dest, MARKER), 'utf8')) as Marker;
  } catch (err) {
    if (errno(err) === 'ENOENT' || err instanceof SyntaxError) return undefined;
    throw err;
  }
}

async function writeAtomically(path: string, text: string): Promise<void> {
  const tmp = `${path}.${process.pid}.${randomUUID().slice(0, 8)}.tmp`;
  const fh = await open(tmp, 'w');
  try {
    await fh.writeFile(text);
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, path);
}

/** The holder's identity as others see it: the pod (hostname) and process. */
const holderName = () => `${hostname()}:${process.pid}`;

export async function fetchModel(options: FetchOptions): Promise<FetchResult> {
  const { dest, logger, source } = options;
  const staleMs = options.staleLockMs ?? 60_000;
  const pollMs = options.pollMs ?? 2_000;
  const waitTimeoutMs = options.waitTimeoutMs ?? 2 * 3600_000;
  const started = performance.now();
  const seconds = () => (performance.now() - started) / 1e3;
  const lockPath = join(dest, LOCK);
  await mkdir(dest, { recursive: true });

  let waitingSince: number | undefined;
  for (;;) {
    const marker = await readMarker(dest);
    if (marker?.source === source.uri) {
      const bytes = marker.files.reduce((n, f) => n + f.size, 0);
      const outcome = waitingSince === undefined ? 'present' : 'reused';
      logger.info(
        {
          dest,
          source: source.uri,
          revision: marker.revision,
          files: marker.files.length,
          bytes,
          fetched_by: marker.fetched_by,
          outcome,
        },
        outcome === 'present'
          ? 'model present in the cache'
          : 'model fetched by another downloader; reusing it',
      );
      return { outcome, files: marker.files.length, bytes, transferredBytes: 0, seconds: seconds() };
    }
    const lock: LockInfo = { token: randomUUID(), holder: holderName(), started: new Date().toISOString() };
    try {
      await writeFile(lockPath, JSON.stringify(lock), { flag: 'wx' });
    } catch (err) {
      if (errno(err) !== 'EEXIST') throw err;
      if (await takeOverIfStale(lockPath, staleMs, logger)) continue;
      const now = performance.now();
      if (waitingSince === undefined) {
        waitingSince = now;
        const holder = await readLock(lockPath);
        logger.info(
          { dest, source: source.uri, holder: holder?.holder, stale_after_s: staleMs / 1e3 },
          'another downloader holds the lock; waiting for it',
        );
      } else if (now - waitingSince > waitTimeoutMs) {
        throw new FetchError(
          'STRATA_FETCH_LOCK',
          `waited ${round(waitTimeoutMs / 1e3, 0)} s for another downloader of ${dest}; its lock (${lockPath}) is still live`,
        );
      }
      await sleep(pollMs);
      continue;
    }
    // The lock is this process's: fetch (unless the marker appeared just before), then let go.
    try {
      const again = await readMarker(dest);
      if (again?.source === source.uri) continue;
      return await fetchLocked(options, lock, lockPath, staleMs, started);
    } finally {
      await releaseLock(lockPath, lock.token);
    }
  }
}

async function readLock(lockPath: string): Promise<LockInfo | undefined> {
  try {
    return JSON.parse(await readFile(lockPath, 'utf8')) as LockInfo;
  } catch {
    return undefined;
  }
}

/**
 * True when the lock is gone or was stale and is now removed (the caller tries to take it).
 * Two waiters may find it stale at once: each renames it to a name of its own first, and only
 * the one whose renamed file is the stale lock it read removes it; the other puts back what it
 * moved (a new holder's fresh lock).
 */
async function takeOverIfStale(lockPath: string, staleMs: number, logger: Logger): Promise<boolean> {
  let seen: { mtimeMs: number };
  let text: string;
  try {
    seen = await stat(lockPath);
    text = await readFile(lockPath, 'utf8');
  } catch (err) {
    if (errno(err) === 'ENOENT') return true;
    throw err;
  }
  const age = Date.now() - seen.mtimeMs;
  if (age < staleMs) return false;
  const claim = `${lockPath}.stale-${process.pid}-${randomUUID().slice(0, 8)}`;
  try {
    await rename(lockPath, claim);
  } catch (err) {
    if (errno(err) === 'ENOENT') return true;
    throw err;
  }
  const moved = await readFile(claim, 'utf8');
  if (moved !== text) {
    await link(claim, lockPath).catch(() => undefined);
    await unlink(claim).catch(() => undefined);
    return true;
  }
  await unlink(claim);
  let holder: string | undefined;
  try {
    holder = (JSON.parse(text) as LockInfo).holder;
  } catch {
    holder = undefined;
  }
  logger.warn({ lock: lockPath, holder, age_s: round(age / 1e3) }, 'took over a stale download lock');
  return true;
}

async function releaseLock(lockPath: string, token: string): Promise<void> {
  if ((await readLock(lockPath))?.token === token) await unlink(lockPath).catch(() => undefined);
}

function newHasher(file: RemoteFile): Hash | undefined {
  if (!file.digest) return undefined;
  if (file.digest.algorithm === 'sha256') return createHash('sha256');
  return createHash('sha1').update(`blob ${file.size}\0`);
}

type Journal = Record<string, { version: string; size: number }>;

async function fetchLocked(
  options: FetchOptions,
  lock: LockInfo,
  lockPath: string,
  staleMs: number,
  started: number,
): Promise<FetchResult> {
  const { dest, logger, source } = options;
  const work = join(dest, WORK_DIR);
  const journalPath = join(work, 'verified.json');
  const abort = new AbortController();
  let lost: FetchError | undefined;

  // The heartbeat: touch the lock; a lock that is no longer ours stops the download.
  const heartbeat = setInterval(
    () => {
      void (async () => {
        const now = await readLock(lockPath);
        if (now?.token !== lock.token) {
          lost = new FetchError(
            'STRATA_FETCH_LOCK',
            `lost the download lock of ${dest} to ${now?.holder ?? 'nobody'} (this process stalled past the ${staleMs / 1e3} s stale time)`,
          );
          abort.abort(lost);
          return;
        }
        const t = new Date();
        await utimes(lockPath, t, t).catch(() => undefined);
      })();
    },
    options.heartbeatMs ?? Math.max(250, staleMs / 4),
  );

  let progress: ReturnType<typeof setInterval> | undefined;
  try {
    logger.info(
      { dest, source: source.uri, holder: lock.holder },
      'download lock acquired; listing the source',
    );
    const { revision, files } = await source.list(options.include);
    const unverified = files.filter((f) => !f.digest);
    if (unverified.length > 0 && options.requireChecksum)
      throw new FetchError(
        'STRATA_FETCH_CHECKSUM',
        `${source.uri}: no checksum for ${unverified.map((f) => f.path).join(', ')} (--require-checksum); add a SHA256SUMS file or upload with a SHA-256 checksum`,
      );
    for (const f of unverified)
      logger.warn(
        { file: f.path, source: source.uri },
        'the source gives no checksum for this file: its size alone is checked',
      );

    // Whatever marker is there is another source's: gone before any file changes.
    await rm(join(dest, MARKER), { force: true });
    await mkdir(work, { recursive: true });
    let journal: Journal = {};
    try {
      journal = JSON.parse(await readFile(journalPath, 'utf8')) as Journal;
    } catch {
      journal = {};
    }

    const total = files.reduce((n, f) => n + f.size, 0);
    let done = 0;
    let transferred = 0;
    let filesDone = 0;
    let last = { at: performance.now(), transferred: 0 };
    const throttleStart = performance.now();
    logger.info(
      { source: source.uri, revision, files: files.length, total_bytes: total, dest },
      'downloading the model',
    );
    const report = (msg: string) => {
      const now = performance.now();
      const interval = (now - last.at) / 1e3;
      logger.info(
        {
          bytes: done,
          total_bytes: total,
          percent: total > 0 ? round((100 * done) / total) : 100,
          mb_per_s: interval > 0 ? round((transferred - last.transferred) / MB / interval) : 0,
          files_done: filesDone,
          files_total: files.length,
        },
        msg,
      );
      last = { at: now, transferred };
    };
    progress = setInterval(() => report('download progress'), options.progressIntervalMs ?? 5_000);

    const throttle = async () => {
      const rate = options.maxBytesPerSecond;
      if (!rate) return;
      const ahead = transferred / rate - (performance.now() - throttleStart) / 1e3;
      if (ahead > 0) await sleep(ahead * 1e3);
    };

    const fetchFile = async (file: RemoteFile) => {
      const final = join(dest, file.path);
      const known = journal[file.path];
      if (known && known.version === file.version && known.size === file.size) {
        const st = await stat(final).catch(() => undefined);
        if (st?.size === file.size) {
          done += file.size;
          filesDone++;
          return;
        }
      }
      const part = join(work, 'partial', `${file.path}.part`);
      const meta = `${part}.json`;
      await mkdir(dirname(part), { recursive: true });
      let offset = 0;
      try {
        const m = JSON.parse(await readFile(meta, 'utf8')) as { version: string; size: number };
        const st = await stat(part);
        if (m.version === file.version && m.size === file.size && st.size <= file.size) offset = st.size;
      } catch {
        offset = 0;
      }
      if (offset === 0) await rm(part, { force: true });
      await writeFile(meta, JSON.stringify({ version: file.version, size: file.size }));

      let hasher = newHasher(file);
      if (offset > 0 && hasher) {
        for await (const chunk of createReadStream(part, { end: offset - 1 })) hasher.update(chunk as Buffer);
      }
      const opened = await source.open(file, offset, abort.signal);
      if (opened.offset !== offset) {
        await truncate(part, opened.offset).catch(() => undefined);
        hasher = newHasher(file);
        offset = opened.offset;
      }
      if (offset > 0)
        logger.info({ file: file.path, offset, size: file.size }, 'resuming a partial download');
      done += offset;
      let size = offset;
      const fh = await open(part, offset > 0 ? 'a' : 'w');
      try {
        for await (const chunk of opened.body) {
          if (abort.signal.aborted) throw abort.signal.reason;
          await fh.write(chunk);
          hasher?.update(chunk);
          size += chunk.length;
          done += chunk.length;
          transferred += chunk.length;
          if (size > file.size) break;
          await throttle();
        }
        await fh.sync();
      } finally {
        await fh.close();
      }
      if (size !== file.size) {
        if (size > file.size) await rm(part, { force: true });
        throw new FetchError(
          'STRATA_FETCH_SOURCE',
          `${source.uri}: ${file.path}: got ${size} bytes, the source listed ${file.size}`,
        );
      }
      if (file.digest && hasher) {
        const got = hasher.digest('hex');
        if (got !== file.digest.hex) {
          await rm(part, { force: true });
          await rm(meta, { force: true });
          throw new FetchError(
            'STRATA_FETCH_CHECKSUM',
            `checksum mismatch for ${file.path} from ${source.uri}: expected ${file.digest.algorithm} ${file.digest.hex} (${file.digest.origin}), got ${got}; the downloaded file was removed`,
          );
        }
      }
      await mkdir(dirname(final), { recursive: true });
      await rename(part, final);
      await rm(meta, { force: true });
      journal[file.path] = { version: file.version, size: file.size };
      await writeAtomically(journalPath, JSON.stringify(journal));
      filesDone++;
      logger.info(
        {
          file: file.path,
          bytes: file.size,
          checksum: file.digest ? `${file.digest.algorithm} (${file.digest.origin})` : 'none',
        },
        'file verified',
      );
    };

    // A pool of workers over the files, largest first; the first failure stops the others.
    const queue = [...files].sort((a, b) => b.size - a.size);
    const worker = async () => {
      for (let f = queue.shift(); f; f = queue.shift()) {
        if (abort.signal.aborted) return;
        try {
          await fetchFile(f);
        } catch (err) {
          abort.abort(err);
          throw err;
        }
      }
    };
    const results = await Promise.allSettled(
      Array.from({ length: Math.max(1, Math.min(options.concurrency ?? 4, files.length)) }, worker),
    );
    if (lost) throw lost;
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw abort.signal.reason ?? failed.reason;
    if ((await readLock(lockPath))?.token !== lock.token)
      throw new FetchError('STRATA_FETCH_LOCK', `lost the download lock of ${dest} before finishing`);

    const marker: Marker = {
      source: source.uri,
      revision,
      files: files.map((f) => ({ path: f.path, size: f.size, ...(f.digest ? { digest: f.digest } : {}) })),
      completed_at: new Date().toISOString(),
      fetched_by: lock.holder,
    };
    await writeAtomically(join(dest, MARKER), `${JSON.stringify(marker, null, 2)}\n`);
    await rm(work, { recursive: true, force: true });
    const secs = (performance.now() - started) / 1e3;
    clearInterval(progress);
    report('download progress');
    logger.info(
      {
        source: source.uri,
        revision,
        dest,
        files: files.length,
        bytes: total,
        transferred_bytes: transferred,
        seconds: round(secs, 2),
        mb_per_s: secs > 0 ? round(transferred / MB / secs) : 0,
      },
      'model fetched',
    );
    return {
      outcome: 'downloaded',
      files: files.length,
      bytes: total,
      transferredBytes: transferred,
      seconds: secs,
    };
  } finally {
    clearInterval(heartbeat);
    if (progress) clearInterval(progress);
  }
}
