// End-of-run summary: a readable table on stdout and a compact JSON file (config.summaryJson)
// with the figures docs/reliability.md and docs/benchmarks quote.
import { config } from './config.js';

const TRENDS = [
  ['strata_ttft_ms', 'TTFT (ms)'],
  ['strata_itl_ms', 'inter-token (ms)'],
  ['strata_e2e_ms', 'request (ms)'],
  ['strata_tokens_per_s', 'tokens/s per request'],
];
const STATS = ['count', 'avg', 'med', 'p(90)', 'p(95)', 'p(99)', 'max'];

export const summaryTrendStats = ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)', 'p(99)', 'count'];

function value(data, name, stat) {
  return data.metrics[name]?.values?.[stat];
}

function fmt(v) {
  if (v === undefined || v === null) return '-';
  if (Math.abs(v) >= 100) return v.toFixed(0);
  return v.toFixed(v === Math.round(v) ? 0 : 2);
}

function thresholdResults(data) {
  const out = {};
  for (const [name, metric] of Object.entries(data.metrics)) {
    if (!metric.thresholds) continue;
    for (const [expr, result] of Object.entries(metric.thresholds)) out[`${name}: ${expr}`] = result.ok;
  }
  return out;
}

export function compactSummary(scenario, data) {
  const seconds = (data.state?.testRunDurationMs ?? 0) / 1000;
  const requests = value(data, 'strata_requests', 'count') ?? 0;
  const outputTokens = value(data, 'strata_output_tokens', 'count') ?? 0;
  const trends = {};
  for (const [name] of TRENDS) {
    if (!data.metrics[name]) continue;
    trends[name] = Object.fromEntries(STATS.map((s) => [s, value(data, name, s) ?? null]));
  }
  return {
    scenario,
    label: config.label,
    target: config.target,
    duration_s: seconds,
    requests,
    requests_per_s: seconds > 0 ? requests / seconds : 0,
    output_tokens: outputTokens,
    output_tokens_per_s: seconds > 0 ? outputTokens / seconds : 0,
    error_rate: value(data, 'strata_errors', 'rate') ?? 0,
    rate_limited_rate: value(data, 'strata_rate_limited', 'rate') ?? 0,
    incomplete: value(data, 'strata_incomplete', 'count') ?? 0,
    dropped_iterations: value(data, 'dropped_iterations', 'count') ?? 0,
    checks_rate: value(data, 'checks', 'rate') ?? null,
    trends,
    thresholds: thresholdResults(data),
    settings: {
      endpoints: config.endpoints,
      stream_ratio: config.streamRatio,
      prompt_mix: config.prompts,
      shared_prefix_ratio: config.sharedPrefixRatio,
      sessions: config.sessions,
      max_tokens: config.maxTokens,
    },
  };
}

export function table(s) {
  const rows = [
    `strata ${s.scenario} against ${s.target}${s.label ? ` (${s.label})` : ''}`,
    `  ${s.requests} requests in ${s.duration_s.toFixed(1)} s (${s.requests_per_s.toFixed(2)}/s), ` +
      `${s.output_tokens} output tokens (${s.output_tokens_per_s.toFixed(1)}/s)`,
    `  errors ${(s.error_rate * 100).toFixed(2)}%, 429s ${(s.rate_limited_rate * 100).toFixed(2)}%, ` +
      `incomplete ${s.incomplete}, dropped iterations ${s.dropped_iterations}`,
    '',
    `  ${'metric'.padEnd(22)}${STATS.map((h) => h.padStart(9)).join('')}`,
  ];
  for (const [name, title] of TRENDS) {
    const t = s.trends[name];
    if (t) rows.push(`  ${title.padEnd(22)}${STATS.map((st) => fmt(t[st]).padStart(9)).join('')}`);
  }
  rows.push('');
  for (const [name, ok] of Object.entries(s.thresholds)) rows.push(`  ${ok ? 'ok  ' : 'FAIL'} ${name}`);
  return `${rows.join('\n')}\n`;
}

/** handleSummary for a scenario file. */
export function summaryHandler(scenario) {
  return (data) => {
    const s = compactSummary(scenario, data);
    return { stdout: table(s), [config.summaryJson]: `${JSON.stringify(s, null, 2)}\n` };
  };
}
