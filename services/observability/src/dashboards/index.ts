import { dashboardJson } from './grafana.js';
import { DASHBOARDS } from './specs.js';

/** [file name, JSON text] for every dashboard, e.g. ['strata-engine.json', '{...}\n']. */
export function dashboardFiles(): [string, string][] {
  return DASHBOARDS.map((spec) => [`${spec.uid}.json`, `${JSON.stringify(dashboardJson(spec), null, 2)}\n`]);
}
