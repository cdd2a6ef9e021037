import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ConfigError } from '@strata/common';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadRoutingFile, type RoutingFileWatcher, watchRoutingFile } from '../../src/routing/reload.js';
import type { RoutingConfig } from '../../src/routing/rules.js';

const file = (pool: string, extra = '') => `
pools:
  ${pool}: { backends: [{ name: b0, url: "http://127.0.0.1:9000" }] }
default:
  pool: ${pool}
${extra}`;

function nextEvent<T>(register: (resolve: (value: T) => void) => void): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no reload event within 5 s')), 5000);
    register((value) => {
      clearTimeout(timer);
      resolve(value);
    });
  });
}

describe('routing file reload', () => {
  let dir: string;
  let path: string;
  let watcher: RoutingFileWatcher | undefined;
  let onReload: (config: RoutingConfig) => void = () => {};
  let onError: (error: ConfigError) => void = () => {};

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'strata-routing-'));
    path = join(dir, 'routing.yaml');
  });
  afterEach(() => {
    watcher?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const start = () => {
    watcher = watchRoutingFile(path, {
      debounceMs: 20,
      onReload: (c) => onReload(c),
      onError: (e) => onError(e),
    });
    return watcher;
  };

  it('loads the file once and throws naming every problem when it is bad', () => {
    writeFileSync(path, file('chat'));
    expect(loadRoutingFile(path).rules.map((r) => r.pool)).toEqual(['chat']);
    writeFileSync(path, 'pools: {}\ndefault: { pool: chat }\n');
    expect(() => loadRoutingFile(path)).toThrow('default.pool: unknown pool "chat"');
    expect(() => loadRoutingFile(join(dir, 'absent.yaml'))).toThrow(/cannot read the file/);
  });

  it('applies a valid change and keeps the last good config on an invalid one', async () => {
    writeFileSync(path, file('chat'));
    const w = start();
    expect(w.current().pools).toEqual({ chat: { backends: [{ name: 'b0', url: 'http://127.0.0.1:9000' }] } });

    const reloaded = nextEvent<RoutingConfig>((r) => {
      onReload = r;
    });
    writeFileSync(path, file('code'));
    expect((await reloaded).rules.map((r) => r.pool)).toEqual(['code']);
    expect(w.current().rules.map((r) => r.pool)).toEqual(['code']);

    const rejected = nextEvent<ConfigError>((r) => {
      onError = r;
    });
    writeFileSync(path, file('code', 'rules: [{ name: r1, pool: ghost }]'));
    expect((await rejected).problems).toEqual(['rules.0.pool: unknown pool "ghost"']);
    expect(w.current().rules.map((r) => r.pool)).toEqual(['code']);

    const broken = nextEvent<ConfigError>((r) => {
      onError = r;
    });
    writeFileSync(path, 'pools: [');
    expect((await broken).problems[0]).toMatch(/^not valid YAML/);
    expect(w.current().rules.map((r) => r.pool)).toEqual(['code']);
  });

  it('follows a save by rename (editors, ConfigMap volumes)', async () => {
    writeFileSync(path, file('chat'));
    const w = start();
    const reloaded = nextEvent<RoutingConfig>((r) => {
      onReload = r;
    });
    writeFileSync(join(dir, 'routing.yaml.tmp'), file('bulk'));
    renameSync(join(dir, 'routing.yaml.tmp'), path);
    expect((await reloaded).rules.map((r) => r.pool)).toEqual(['bulk']);
    expect(w.current().rules.map((r) => r.pool)).toEqual(['bulk']);
  });

  it('reload() re-reads on demand and ignores unchanged text', () => {
    writeFileSync(path, file('chat'));
    const w = start();
    expect(w.reload()).toBe(false);
    writeFileSync(path, file('code'));
    expect(w.reload()).toBe(true);
    expect(w.current().rules.map((r) => r.pool)).toEqual(['code']);
  });
});
