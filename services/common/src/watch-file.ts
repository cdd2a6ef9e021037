// Keeps a validated configuration file current (routing rules, tenants and their key hashes).
// The directory is watched, not the file: editors save by rename and Kubernetes ConfigMap and
// Secret volumes swap a symlink, and both break a watch on the old inode. Events are debounced;
// a changed file that validates replaces the value, one that does not keeps the last good one
// and reports why.
import { type FSWatcher, readFileSync, watch } from 'node:fs';
import { basename, dirname } from 'node:path';
import { ConfigError } from './config.js';

/** Turns a file's text into a value; throws ConfigError naming every problem. */
export type ConfigParser<T> = (text: string, source: string) => T;

export interface ConfigFileWatcherOptions<T> {
  /** Quiet period after the last change event before the file is re-read, in milliseconds. */
  debounceMs?: number;
  onReload?: (value: T) => void;
  /** The new file was rejected; the previous value stays in force. */
  onError?: (error: ConfigError) => void;
}

export interface ConfigFileWatcher<T> {
  /** The last good value. */
  current(): T;
  /** Re-reads the file now; true when a new value was applied. */
  reload(): boolean;
  close(): void;
}

function readText(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`file ${file}`, [`cannot read the file: ${(err as Error).message}`]);
  }
}

/** Reads and validates a file once; throws ConfigError naming every problem. */
export function loadConfigFile<T>(file: string, parse: ConfigParser<T>): T {
  return parse(readText(file), `file ${file}`);
}

/** Loads the file (throwing if the first load is invalid) and watches it for changes. */
export function watchConfigFile<T>(
  file: string,
  parse: ConfigParser<T>,
  options: ConfigFileWatcherOptions<T> = {},
): ConfigFileWatcher<T> {
  const debounceMs = options.debounceMs ?? 100;
  let lastText = readText(file);
  let value = parse(lastText, `file ${file}`);
  let timer: NodeJS.Timeout | undefined;

  const reload = (): boolean => {
    let text: string;
    try {
      text = readText(file);
    } catch (err) {
      options.onError?.(err as ConfigError);
      return false;
    }
    // Several events arrive per save, and a rejected text is reported once, not per event.
    if (text === lastText) return false;
    lastText = text;
    try {
      value = parse(text, `file ${file}`);
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      options.onError?.(err);
      return false;
    }
    options.onReload?.(value);
    return true;
  };

  const name = basename(file);
  const watcher: FSWatcher = watch(dirname(file), (_event, changed) => {
    // ConfigMap and Secret swaps touch "..data", not the file name itself: any entry may matter then.
    if (changed !== null && changed !== name && !changed.startsWith('..')) return;
    clearTimeout(timer);
    timer = setTimeout(reload, debounceMs);
  });
  watcher.unref();

  return {
    current: () => value,
    reload,
    close: () => {
      clearTimeout(timer);
      watcher.close();
    },
  };
}
