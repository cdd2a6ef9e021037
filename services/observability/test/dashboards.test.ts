import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DATASOURCE_UID } from '../src/dashboards/grafana.js';
import { dashboardFiles } from '../src/dashboards/index.js';

const dir = join(import.meta.dirname, '..', 'dashboards');

interface Panel {
  datasource: { uid: string };
  targets: { expr: string; datasource: { uid: string } }[];
}

describe('dashboards', () => {
  it('are the files src/dashboards writes (run `pnpm run dashboards` after changing a spec)', () => {
    const files = dashboardFiles();
    expect(
      readdirSync(dir)
        .filter((f) => f.endsWith('.json'))
        .sort(),
    ).toEqual(files.map(([f]) => f).sort());
    for (const [file, text] of files) expect(readFileSync(join(dir, file), 'utf8'), file).toBe(text);
  });

  it('read Prometheus through the datasource variable only, so they import anywhere', () => {
    for (const [file, text] of dashboardFiles()) {
      const dashboard = JSON.parse(text) as { panels: Panel[]; templating: { list: { name: string }[] } };
      expect(dashboard.templating.list[0]?.name, file).toBe('datasource');
      for (const panel of dashboard.panels) {
        expect(panel.datasource.uid).toBe(DATASOURCE_UID);
        expect(panel.targets.length).toBeGreaterThan(0);
        for (const t of panel.targets) expect(t.datasource.uid).toBe(DATASOURCE_UID);
      }
    }
  });
});
