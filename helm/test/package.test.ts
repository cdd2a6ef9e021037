// The chart as it is shipped: `helm package` gives a versioned archive (helm/dist/strata-<version>.tgz) that lints and renders
// exactly as the chart folder does (the dashboards and alerts reached through the
// files/observability link included), and its NOTES tell the installer about --timeout and
// the warmup hook. No cluster here: NOTES.txt is rendered through `tpl` in a copy of the chart.
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { parseManifests } from './support/manifests.js';
import { chartDir, helm, helmDir, KUBE_VERSION, productionValues, template } from './support/tools.js';

const tmp = mkdtempSync(join(tmpdir(), 'strata-package-'));
const version = (parse(readFileSync(join(chartDir, 'Chart.yaml'), 'utf8')) as { version: string }).version;
// The artifact stays in helm/dist (git-ignored), where a release job picks it up.
const dist = join(helmDir, 'dist');
const archive = join(dist, `strata-${version}.tgz`);

// The identity Secret's key is random on each render (no cluster to look the installed one up in).
const withoutRandomKey = (manifests: string) => manifests.replace(/^( {2}keys: )"[^"]*"$/m, '$1"<random>"');

describe('helm package', () => {
  beforeAll(() => {
    const r = helm(['package', chartDir, '--destination', dist]);
    expect(r.status, r.stderr).toBe(0);
  });

  it('writes strata-<Chart.yaml version>.tgz with the schema, NOTES and the observability files', () => {
    const list = helm(['show', 'chart', archive]);
    expect(list.status, list.stderr).toBe(0);
    expect(parse(list.stdout)).toMatchObject({ name: 'strata', version });
    const tar = spawnSync('tar', ['-tzf', archive], { encoding: 'utf8' });
    expect(tar.status, tar.stderr).toBe(0);
    const files = tar.stdout.split('\n');
    for (const file of [
      'values.schema.json',
      'templates/NOTES.txt',
      'files/observability/dashboards/strata-overview.json',
    ])
      expect(files, file).toContain(`strata/${file}`);
  });

  it('lints --strict and renders exactly as the chart folder, for both values files', () => {
    for (const values of [[], [productionValues]]) {
      const lint = helm([
        'lint',
        archive,
        '--strict',
        '--kube-version',
        KUBE_VERSION,
        ...values.flatMap((v) => ['-f', v]),
      ]);
      expect(lint.stdout, lint.stderr).toContain('1 chart(s) linted, 0 chart(s) failed');
      expect(withoutRandomKey(template({ chart: archive, values }))).toBe(
        withoutRandomKey(template({ values })),
      );
    }
  });
});

describe('NOTES.txt', () => {
  /** NOTES.txt rendered with `values` (tpl in a copy of the chart: helm template skips NOTES). */
  const notes = (values: string[]): string => {
    const copy = join(tmp, `notes-${values.length}`);
    cpSync(chartDir, copy, { recursive: true, dereference: true });
    cpSync(join(chartDir, 'templates/NOTES.txt'), join(copy, 'files/notes.txt'));
    writeFileSync(
      join(copy, 'templates/zz-notes.yaml'),
      'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: |\n{{ tpl (.Files.Get "files/notes.txt") . | indent 4 }}\n',
    );
    const doc = parseManifests(template({ chart: copy, values })).find((d) => d.metadata.name === 'notes');
    return String((doc as unknown as { data: { notes: string } }).data.notes);
  };

  it('says loudly that --timeout must exceed the warmup hook, with a command that does', () => {
    const text = notes([]);
    expect(text).toContain('IMPORTANT: the warmup hook');
    expect(text).toContain('warmup.timeoutS = 1800 s');
    // 1800 s is 30 min: the suggested --timeout leaves a margin above it.
    expect(text).toMatch(/--timeout 35m/);
    expect(text).toContain('Models served: llama-3-8b');
  });

  it('names every model of the production values and how to reach the load balancer', () => {
    const text = notes([productionValues]);
    const models = (parse(readFileSync(productionValues, 'utf8')) as { models: { name: string }[] }).models;
    for (const m of models) expect(text).toContain(m.name);
    expect(text).toContain('EXTERNAL-IP');
  });
});
