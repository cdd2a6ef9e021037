// A small builder for Grafana dashboard JSON (schemaVersion 39). Every panel and variable reads
// the Prometheus datasource through the ${datasource} variable, so the files import into any
// Grafana. Panels are laid out left to right, two or three per row, 8 units high.

export interface Target {
  expr: string;
  legend?: string;
}

export interface PanelSpec {
  title: string;
  description: string;
  /** Grafana unit id: s, percentunit, reqps, short, ... */
  unit: string;
  targets: Target[];
  /** timeseries (default) or stat. */
  type?: 'timeseries' | 'stat';
  /** Width in grid units (24 = full row); default 12. */
  width?: number;
}

export interface DashboardSpec {
  uid: string;
  title: string;
  description: string;
  tags: string[];
  panels: PanelSpec[];
  /** Adds a model_name selector ($model) read from vllm:num_requests_running. */
  modelVariable?: boolean;
}

/** Grafana's variable syntax (a literal "${datasource}"), not a JS template. */
export const DATASOURCE_UID = '$' + '{datasource}';
const DATASOURCE = { type: 'prometheus', uid: DATASOURCE_UID } as const;
const PANEL_HEIGHT = 8;

function panelJson(spec: PanelSpec, id: number, gridPos: { x: number; y: number; w: number; h: number }) {
  const type = spec.type ?? 'timeseries';
  return {
    id,
    type,
    title: spec.title,
    description: spec.description,
    datasource: DATASOURCE,
    gridPos,
    fieldConfig: {
      defaults: {
        unit: spec.unit,
        ...(type === 'timeseries' ? { custom: { lineWidth: 1, fillOpacity: 10, showPoints: 'never' } } : {}),
      },
      overrides: [],
    },
    options:
      type === 'stat'
        ? { reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false }, colorMode: 'value' }
        : { legend: { displayMode: 'list', placement: 'bottom' }, tooltip: { mode: 'multi', sort: 'desc' } },
    targets: spec.targets.map((t, i) => ({
      refId: String.fromCharCode(65 + i),
      datasource: DATASOURCE,
      expr: t.expr,
      legendFormat: t.legend ?? '__auto',
      range: true,
    })),
  };
}

function templating(spec: DashboardSpec) {
  const list: unknown[] = [
    {
      name: 'datasource',
      label: 'Data source',
      type: 'datasource',
      query: 'prometheus',
      current: {},
      hide: 0,
    },
  ];
  if (spec.modelVariable) {
    list.push({
      name: 'model',
      label: 'Model',
      type: 'query',
      datasource: DATASOURCE,
      definition: 'label_values(vllm:num_requests_running, model_name)',
      query: { query: 'label_values(vllm:num_requests_running, model_name)', refId: 'model' },
      includeAll: true,
      allValue: '.*',
      multi: true,
      refresh: 2,
      current: {},
      hide: 0,
    });
  }
  return { list };
}

export function dashboardJson(spec: DashboardSpec) {
  let x = 0;
  let y = 0;
  const panels = spec.panels.map((p, i) => {
    const w = p.width ?? 12;
    if (x + w > 24) {
      x = 0;
      y += PANEL_HEIGHT;
    }
    const json = panelJson(p, i + 1, { x, y, w, h: PANEL_HEIGHT });
    x += w;
    return json;
  });
  return {
    uid: spec.uid,
    title: spec.title,
    description: spec.description,
    tags: ['strata', ...spec.tags],
    timezone: 'browser',
    editable: true,
    graphTooltip: 1,
    schemaVersion: 39,
    version: 1,
    refresh: '30s',
    time: { from: 'now-1h', to: 'now' },
    templating: templating(spec),
    annotations: { list: [] },
    panels,
  };
}

/** histogram_quantile over a rate of _bucket, summed by le plus `by`. */
export function quantile(q: number, metric: string, selector = '', by: string[] = []): string {
  const groups = ['le', ...by].join(', ');
  return `histogram_quantile(${q}, sum by (${groups}) (rate(${metric}_bucket${selector}[$__rate_interval])))`;
}

/** p50, p95 and p99 targets of one histogram. */
export function percentiles(metric: string, selector = ''): Target[] {
  return [0.5, 0.95, 0.99].map((q) => ({
    expr: quantile(q, metric, selector),
    legend: `p${Math.round(q * 100)}`,
  }));
}
