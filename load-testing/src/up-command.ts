// `strata-platform up`: the local platform on its embedded defaults, in the foreground until
// Ctrl-C or SIGTERM (scripts/strata up). Each service's JSON log goes to a file; the console shows
// the addresses, a line per request, warnings and errors (--verbose: the raw log lines instead).
import { readFileSync } from 'node:fs';
import { isAbsolute, join, relative } from 'node:path';
import { createInterface } from 'node:readline';
import {
  defaultModelDir,
  type Platform,
  repoRoot,
  SERVICE_NAMES,
  type ServiceName,
  startPlatform,
} from './platform.js';
import { newRunLogDir, ServiceLogFiles } from './run-logs.js';
import { UpConsole } from './up-console.js';

export interface UpOptions {
  host: string;
  ephemeral: boolean;
  /** No line per request. */
  quiet: boolean;
  /** Every service's raw log lines on the console, as well as in the files. */
  verbose: boolean;
  /** The folder for the <service>.log files; default a new .strata/run/<time>/logs. */
  logDir?: string;
}

const WIDTH = Math.max(...SERVICE_NAMES.map((n) => n.length));

/** A path as short as it reads well: relative to the working directory when inside it. */
function shown(path: string): string {
  const rel = relative(process.cwd(), path);
  return rel !== '' && !rel.startsWith('..') && !isAbsolute(rel) ? rel : path;
}

export function banner(platform: Platform, logDir: string, verbose: boolean, keys: boolean): string {
  const model = defaultModelDir();
  const lines = [
    '',
    'Strata local platform is up (embedded defaults: CPU engine, in-memory stores):',
    model
      ? `  model: ${model} (the backend turns ready after warmup)`
      : '  model: none found: set STRATA_MODEL_DIR to a Hugging Face model directory',
    ...platform.services.map(
      (s) => `  ${s.name.padEnd(WIDTH)}  ${s.url}   /health/live  /health/ready  /metrics   (pid ${s.pid})`,
    ),
    `  logs: ${shown(logDir)}/<service>.log (JSON lines)${verbose ? '' : '; --verbose prints them here'}`,
    `Press Ctrl-C to stop${keys ? ', Enter to show this again' : ''}.`,
    '',
  ];
  return lines.join('\n');
}

/**
 * True when this process is in the foreground of its terminal (Linux: /proc/self/stat). A
 * background job (`up &`) that reads the terminal is stopped by SIGTTIN, so it must not.
 */
export function inForeground(): boolean {
  try {
    const stat = readFileSync('/proc/self/stat', 'utf8');
    // After "(comm)": state ppid pgrp session tty_nr tpgid ...
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[2] !== undefined && fields[2] === fields[5];
  } catch {
    return false;
  }
}

/**
 * Calls onEnter for each line typed on a terminal input; does nothing (returns undefined) when
 * the input is not a terminal (a pipe, /dev/null, closed) or this process is not its foreground.
 * The terminal stays in line mode, so Ctrl-C still sends SIGINT.
 */
export function onEnter(
  input: NodeJS.ReadableStream & { isTTY?: boolean },
  callback: () => void,
  foreground: boolean = inForeground(),
): { close(): void } | undefined {
  if (!input.isTTY || !foreground) return undefined;
  const lines = createInterface({ input });
  lines.on('line', callback);
  return { close: () => lines.close() };
}

export async function upCommand(options: UpOptions): Promise<void> {
  const logDir = options.logDir ?? newRunLogDir(join(repoRoot, '.strata', 'run'));
  const files = new ServiceLogFiles<ServiceName>(logDir, SERVICE_NAMES);
  const write = (text: string) => process.stdout.write(text);
  const view = new UpConsole({ write, requests: !options.quiet, width: WIDTH });
  process.stdout.write(`Starting the Strata services; their logs go to ${shown(logDir)}\n`);

  let platform: Platform;
  try {
    platform = await startPlatform({
      host: options.host,
      ...(options.ephemeral ? { ports: Object.fromEntries(SERVICE_NAMES.map((n) => [n, 0])) } : {}),
      onLine: (name, line) => {
        files.write(name, line);
        if (options.verbose) write(`[${name.padEnd(WIDTH)}] ${line}\n`);
        else view.line(name, line);
      },
      onExit: (name, code, signal) => view.exited(name, code, signal, shown(files.path(name))),
    });
  } catch (err) {
    files.close();
    process.stderr.write(`strata up: ${(err as Error).message}\nThe services' logs: ${shown(logDir)}\n`);
    process.exit(1);
  }

  const keys = onEnter(process.stdin, () => write(banner(platform, logDir, options.verbose, true)));
  // The handlers before the banner: whoever reads its "Press Ctrl-C to stop" may signal at once.
  let stopping = false;
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => {
      if (stopping) return;
      stopping = true;
      keys?.close();
      view.flush();
      write(`\n${signal}: draining and stopping the services...\n`);
      // The files stay open to the end: lines read after a service's exit still land in them.
      platform.stop().then(() => {
        write(`Stopped. The services' logs: ${shown(logDir)}\n`);
        process.exit(0);
      });
    });
  }
  write(banner(platform, logDir, options.verbose, keys !== undefined));
}
