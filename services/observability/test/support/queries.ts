// Every PromQL query the package ships: each target of each dashboard panel (template variables
// substituted as Grafana would), each dashboard variable, and each recording and alerting rule.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';

export interface ShippedQuery {
  /** Where it comes from, for failure messages: "strata-engine.json / KV cache usage / A". */
  source: string;
  expr: string;
}

const root = join(import.meta.dirname, '..', '..');
export const RULE_FILES = readdirSync(join(root, 'alerts'))
  .filter((f) => f.endsWith('.yaml'))
  .map((f) => join(root, 'alerts', f));

/** Grafana's variables as the stack test sets them: every model, a 5-minute rate window. */
export function substitute(expr: string): string {
  return expr
    .replaceAll('$__rate_interval', '5m')
    .replaceAll('$' + '{model}', '.*')
    .replaceAll('$model', '.*');
}

interface DashboardJson {
  panels: { title: string; targets: { refId: string; expr: string }[] }[];
  templating: { list: { name: string; type: string; query?: { query: string } }[] };
}

export function dashboardQueries(): ShippedQuery[] {
  const dir = join(root, 'dashboards');
  const queries: ShippedQuery[] = [];
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.json'))) {
    const dashboard = JSON.parse(readFileSync(join(dir, file), 'utf8')) as DashboardJson;
    for (const variable of dashboard.templating.list) {
      if (variable.type !== 'query' || !variable.query) continue;
      // label_values(metric, label) is Grafana's; its PromQL equivalent lists the same values.
      const m = /^label_values\((.+),\s*(\w+)\)$/.exec(variable.query.query);
      if (!m)
        throw new Error(`${file}: variable ${variable.name}: unsupported query ${variable.query.query}`);
      queries.push({ source: `${file} / variable ${variable.name}`, expr: `count by (${m[2]}) (${m[1]})` });
    }
    for (const panel of dashboard.panels) {
      for (const target of panel.targets) {
        queries.push({ source: `${file} / ${panel.title} / ${target.refId}`, expr: substitute(target.expr) });
      }
    }
  }
  return queries;
}

interface RuleFile {
  groups: { name: string; rules: { record?: string; alert?: string; expr: string }[] }[];
}

/**
 * An alert's expression returns series only while it fires. To check that its names and label
 * matching are right on a healthy stack, every comparison gets the `bool` modifier (0/1 instead
 * of a filter), as `promtool` would not: so `a > 0.9 and b > 0` returns a's series, 0 or 1.
 */
export function withBool(expr: string): string {
  return expr.replace(/\s(==|!=|>=|<=|>|<)\s+(?!bool\b)/g, ' $1 bool ');
}

export function ruleQueries(): ShippedQuery[] {
  const queries: ShippedQuery[] = [];
  for (const file of RULE_FILES) {
    const name = file.split('/').pop();
    const doc = parseYaml(readFileSync(file, 'utf8')) as RuleFile;
    for (const group of doc.groups) {
      for (const rule of group.rules) {
        if (rule.record) {
          queries.push({ source: `${name} / record ${rule.record}`, expr: rule.expr });
          // The recorded series itself: Prometheus evaluated the rule.
          queries.push({ source: `${name} / recorded ${rule.record}`, expr: rule.record });
        } else {
          queries.push({ source: `${name} / alert ${rule.alert}`, expr: withBool(rule.expr) });
        }
      }
    }
  }
  return queries;
}
