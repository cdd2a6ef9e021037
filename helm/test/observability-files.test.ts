// Dashboards and alert rules ship from services/observability through the chart's
// files/observability link (not copies): every file present there becomes a ConfigMap or a
// PrometheusRule, `helm package` carries exactly those files, and the rest of the package
// (sources, node_modules) stays out of the chart.
import { spawnSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { type K8sObject, ofKind, parseManifests } from './support/manifests.js';
import { chartDir, helm, helmTemplate, repoRoot, template } from './support/tools.js';

const observability = join(repoRoot, 'services/observability');
const monitorsOn = ['metrics.prometheusRule.enabled=true', 'metrics.dashboards.enabled=true'];

function filesIn(dir: string, pattern: RegExp): string[] {
  return existsSync(dir)
    ? readdirSync(dir)
        .filter((f) => pattern.test(f))
        .sort()
    : [];
}

function dashboardFor(docs: K8sObject[], file: string): K8sObject | undefined {
  return ofKind(docs, 'ConfigMap').find(
    (c) => c.metadata.annotations?.['strata.dev/source'] === `services/observability/dashboards/${file}`,
  );
}

function ruleFor(docs: K8sObject[], file: string): K8sObject | undefined {
  return ofKind(docs, 'PrometheusRule').find(
    (c) => c.metadata.annotations?.['strata.dev/source'] === `services/observability/alerts/${file}`,
  );
}

function packageListing(chart: string): string[] {
  const out = mkdtempSync(join(tmpdir(), 'strata-pkg-'));
  const r = helm(['package', chart, '--destination', out]);
  expect(r.status, r.stderr).toBe(0);
  const tgz = readdirSync(out).find((f) => f.endsWith('.tgz')) as string;
  const tar = spawnSync('tar', ['-tzf', join(out, tgz)], { encoding: 'utf8' });
  rmSync(out, { recursive: true, force: true });
  return tar.stdout.split('\n').filter(Boolean);
}

describe('observability files through the link', () => {
  it('files/observability is a link to services/observability, not a copy', () => {
    const link = join(chartDir, 'files/observability');
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(readlinkSync(link)).toBe('../../../services/observability');
  });

  it('renders every dashboard and alert file present in services/observability', () => {
    const docs = parseManifests(template({ set: monitorsOn }));
    const dashboards = filesIn(join(observability, 'dashboards'), /\.json$/);
    const alerts = filesIn(join(observability, 'alerts'), /\.ya?ml$/);
    for (const file of dashboards) {
      const cm = dashboardFor(docs, file);
      expect(cm, file).toBeDefined();
      expect(cm?.metadata.labels.grafana_dashboard).toBe('1');
      // Verbatim (modulo the trailing newline YAML's |- drops).
      expect(cm?.data[file]).toBe(
        readFileSync(join(observability, 'dashboards', file), 'utf8').replace(/\n+$/, ''),
      );
    }
    for (const file of alerts) {
      const rule = ruleFor(docs, file);
      expect(rule, file).toBeDefined();
      expect(rule?.spec.groups).toEqual(
        parse(readFileSync(join(observability, 'alerts', file), 'utf8')).groups,
      );
    }
    expect(ofKind(docs, 'PrometheusRule')).toHaveLength(alerts.length);
    expect(ofKind(docs, 'ConfigMap').filter((c) => c.metadata.labels.grafana_dashboard)).toHaveLength(
      dashboards.length,
    );
  });

  it('helm package carries those files and nothing else of the observability package', () => {
    const listing = packageListing(chartDir);
    const shipped = listing.filter((p) => p.startsWith('strata/files/observability/'));
    const expected = [
      ...filesIn(join(observability, 'dashboards'), /\.json$/).map(
        (f) => `strata/files/observability/dashboards/${f}`,
      ),
      ...filesIn(join(observability, 'alerts'), /\.ya?ml$/).map(
        (f) => `strata/files/observability/alerts/${f}`,
      ),
    ].sort();
    // A new top-level entry in services/observability that lands here belongs in .helmignore.
    expect(shipped.sort()).toEqual(expected);
    expect(listing).toContain('strata/values.schema.json');
  });
});

describe('with a stand-in observability package', () => {
  // A copy of the chart whose link points at a fixture package: proves the mechanism whatever
  // services/observability holds today.
  function chartWith(files: Record<string, string>): string {
    const root = mkdtempSync(join(tmpdir(), 'strata-chart-'));
    const chart = join(root, 'chart/strata');
    cpSync(chartDir, chart, {
      recursive: true,
      verbatimSymlinks: true,
      filter: (src) => !src.endsWith('files/observability'),
    });
    const pkg = join(root, 'observability');
    for (const [path, text] of Object.entries({
      'package.json': '{}',
      'src/main.ts': '',
      'node_modules/x/index.js': '',
      ...files,
    })) {
      mkdirSync(join(pkg, path, '..'), { recursive: true });
      writeFileSync(join(pkg, path), text);
    }
    mkdirSync(join(chart, 'files'), { recursive: true });
    symlinkSync('../../../observability', join(chart, 'files/observability'));
    return chart;
  }

  const dashboard = JSON.stringify(
    { title: 'Strata backends', panels: [{ expr: 'sum by (strata_dev_model) (vllm:num_requests_waiting)' }] },
    null,
    2,
  );
  const rules =
    'groups:\n  - name: strata-backend\n    rules:\n      - alert: StrataQueueBuilding\n        expr: sum(vllm:num_requests_waiting) > 10\n        for: 5m\n        annotations:\n          summary: "{{ $labels.model_name }} queue"\n';

  it('turns each dashboard into a labelled ConfigMap and each rule file into a PrometheusRule', () => {
    const chart = chartWith({
      'dashboards/backend_overview.json': dashboard,
      'dashboards/edge.json': '{"title":"Edge"}',
      'alerts/backend.yaml': rules,
      'alerts/router.yml': 'groups: []\n',
      // promtool unit tests beside the rules are not rule files and stay out of the chart.
      'alerts/tests/backend.test.yaml': 'rule_files: [../backend.yaml]\n',
    });
    const docs = parseManifests(template({ chart, set: monitorsOn }));
    expect(dashboardFor(docs, 'backend_overview.json')?.metadata.name).toBe(
      'strata-dashboard-backend-overview',
    );
    expect(dashboardFor(docs, 'backend_overview.json')?.data['backend_overview.json']).toBe(dashboard);
    expect(dashboardFor(docs, 'edge.json')?.data['edge.json']).toBe('{"title":"Edge"}');
    const rule = ruleFor(docs, 'backend.yaml');
    // Alert templates are data to Prometheus, not to Helm: they arrive untouched.
    expect(rule?.spec.groups[0].rules[0].annotations.summary).toBe('{{ $labels.model_name }} queue');
    expect(rule?.spec.groups[0].rules[0].for).toBe('5m');
    expect(ruleFor(docs, 'router.yml')?.spec.groups).toEqual([]);
    const listing = packageListing(chart).filter((p) => p.includes('files/observability'));
    expect(listing.sort()).toEqual([
      'strata/files/observability/alerts/backend.yaml',
      'strata/files/observability/alerts/router.yml',
      'strata/files/observability/dashboards/backend_overview.json',
      'strata/files/observability/dashboards/edge.json',
    ]);
    rmSync(join(chart, '../..'), { recursive: true, force: true });
  });

  it('renders nothing (and fails nothing) when the package has no dashboards or alerts yet', () => {
    const chart = chartWith({});
    const docs = parseManifests(template({ chart, set: monitorsOn }));
    expect(ofKind(docs, 'PrometheusRule')).toEqual([]);
    rmSync(join(chart, '../..'), { recursive: true, force: true });
  });

  it('fails the render with the file name when an alert file is not a rule file', () => {
    const chart = chartWith({ 'alerts/broken.yaml': 'alerts:\n  - nope\n' });
    const r = helmTemplate({ chart, set: monitorsOn });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain(
      'files/observability/alerts/broken.yaml: a Prometheus rule file needs a top-level groups: list',
    );
    rmSync(join(chart, '../..'), { recursive: true, force: true });
    expect(basename(chart)).toBe('strata');
  });
});
