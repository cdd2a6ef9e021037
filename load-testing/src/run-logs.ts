// Where `strata-platform up` keeps what the services print: one file of JSON lines per service,
// <repository>/.strata/run/<local start time>/logs/<service>.log; the newest runs are kept.
import { closeSync, mkdirSync, openSync, readdirSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';

/** Runs kept under .strata/run; older ones are removed when a new one starts. */
export const RUNS_KEPT = 10;

const RUN_NAME = /^\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}(-\d+)?$/;

function runName(now: Date): string {
  const p = (n: number) => String(n).padStart(2, '0');
  return `${now.getFullYear()}-${p(now.getMonth() + 1)}-${p(now.getDate())}_${p(now.getHours())}-${p(now.getMinutes())}-${p(now.getSeconds())}`;
}

/**
 * Makes runsDir/<time>/logs for a new run (<time>-2, -3... when two start in the same second)
 * and removes all but the newest `keep` runs. Returns the logs folder.
 */
export function newRunLogDir(runsDir: string, now = new Date(), keep = RUNS_KEPT): string {
  mkdirSync(runsDir, { recursive: true });
  const name = runName(now);
  let run = join(runsDir, name);
  for (let n = 2; ; n++) {
    try {
      mkdirSync(run);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      run = join(runsDir, `${name}-${n}`);
    }
  }
  const runs = readdirSync(runsDir)
    .filter((entry) => RUN_NAME.test(entry))
    .sort((a, b) => a.localeCompare(b, 'en', { numeric: true }));
  for (const old of runs.slice(0, Math.max(0, runs.length - keep))) {
    rmSync(join(runsDir, old), { recursive: true, force: true });
  }
  const logs = join(run, 'logs');
  mkdirSync(logs);
  return logs;
}

/** One append-only file per service; written synchronously, so nothing is lost at exit. */
export class ServiceLogFiles<Name extends string> {
  private readonly fds = new Map<Name, number>();

  constructor(
    readonly dir: string,
    names: readonly Name[],
  ) {
    mkdirSync(dir, { recursive: true });
    for (const name of names) this.fds.set(name, openSync(this.path(name), 'a'));
  }

  path(name: Name): string {
    return join(this.dir, `${name}.log`);
  }

  write(name: Name, line: string): void {
    const fd = this.fds.get(name);
    if (fd !== undefined) writeSync(fd, `${line}\n`);
  }

  close(): void {
    for (const fd of this.fds.values()) closeSync(fd);
    this.fds.clear();
  }
}
