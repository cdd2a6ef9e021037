// The alert and recording rules, checked and unit-tested by Prometheus' own promtool.
import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const alerts = join(import.meta.dirname, '..', 'alerts');
const ruleFiles = readdirSync(alerts)
  .filter((f) => f.endsWith('.yaml'))
  .map((f) => join(alerts, f));
const testFiles = readdirSync(join(alerts, 'tests'))
  .filter((f) => f.endsWith('.yaml'))
  .map((f) => join(alerts, 'tests', f));

function promtool(args: string[]): string {
  return execFileSync('promtool', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

describe('Prometheus rules', () => {
  it('has rule files and a unit-test file for each', () => {
    expect(ruleFiles.map((f) => f.split('/').pop())).toEqual([
      'strata-platform.yaml',
      'strata-sidecar.yaml',
      'strata-slo.yaml',
    ]);
    expect(testFiles).toHaveLength(ruleFiles.length);
  });

  it('passes promtool check rules', () => {
    const out = promtool(['check', 'rules', ...ruleFiles]);
    expect(out.match(/SUCCESS/g)).toHaveLength(ruleFiles.length);
  });

  it('passes promtool test rules', () => {
    const out = promtool(['test', 'rules', ...testFiles]);
    expect(out.match(/SUCCESS/g)).toHaveLength(testFiles.length);
    expect(out).not.toContain('FAILED');
  });
});
