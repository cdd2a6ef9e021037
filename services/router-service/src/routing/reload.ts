// Loads the routing file and keeps it current. The directory is watched, not the file: editors
// save by rename and Kubernetes ConfigMap volumes swap a symlink, and both break a watch on the
// old inode. Events are debounced; a changed file that validates replaces the config, one that
// does not keeps the last good config and reports why.
import { type FSWatcher, readFileSync, watch } from 'node:fs';
import { basename, dirname } from 'node:path';
import { ConfigError } from '@strata/common';
import { parseRoutingYaml, type RoutingConfig } from './rules.js';

export interface RoutingFileWatcherOptions {
  /** Quiet period after the last change event before the file is re-read, in milliseconds. */
  debounceMs?: number;
  onReload?: (config: RoutingConfig) => void;
  /** The new file was rejected; the previous config stays in force. */
  onError?: (error: ConfigError) => void;
}

export interface RoutingFileWatcher {
  /** The last good config. */
  current(): RoutingConfig;
  /** Re-reads the file now; true when a new config was applied. */
  reload(): boolean;
  close(): void;
}

/** Reads and validates a routing file; throws ConfigError naming every problem. */
export function loadRoutingFile(file: string): RoutingConfig {
  return parseRoutingYaml(readText(file), `file ${file}`);
}

function readText(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`file ${file}`, [`cannot read the file: ${(err as Error).message}`]);
  }
}

/** Loads the file (throwing if the first load is invalid) and watches it for changes. */
export function watchRoutingFile(file: string, options: RoutingFileWatcherOptions = {}): RoutingFileWatcher {
  const debounceMs = options.debounceMs ?? 100;
  let lastText = readText(file);
  let config = parseRoutingYaml(lastText, `file ${file}`);
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
      config = parseRoutingYaml(text, `file ${file}`);
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      options.onError?.(err);
      return false;
    }
    options.onReload?.(config);
    return true;
  };

  const name = basename(file);
  const watcher: FSWatcher = watch(dirname(file), (_event, changed) => {
    // ConfigMap swaps touch "..data", not the file name itself: any entry may matter then.
    if (changed !== null && changed !== name && !changed.startsWith('..')) return;
    clearTimeout(timer);
    timer = setTimeout(reload, debounceMs);
  });
  watcher.unref();

  return {
    current: () => config,
    reload,
    close: () => {
      clearTimeout(timer);
      watcher.close();
    },
  };
}
