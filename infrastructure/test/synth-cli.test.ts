// The synth entry point as users run it: `node dist/main.js` in a real process, with a YAML file
// named by STRATA_INFRA_CONFIG, writing Terraform JSON that plain terraform can consume.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const main = fileURLToPath(new URL('../dist/main.js', import.meta.url));

function run(yaml: string) {
  const dir = mkdtempSync(join(tmpdir(), 'strata-synth-'));
  writeFileSync(join(dir, 'config.yaml'), yaml);
  const r = spawnSync(process.execPath, [main], {
    cwd: dir,
    env: { PATH: process.env.PATH, STRATA_INFRA_CONFIG: join(dir, 'config.yaml') },
    encoding: 'utf8',
  });
  return { ...r, dir };
}

describe('synth entry point', () => {
  it('writes cdktf.out/stacks/<cluster>/cdk.tf.json for the configured cluster', () => {
    const r = run('clusterName: demo\ngpuNodeGroups:\n  - name: l4\n    instanceTypes: [g6.xlarge]\n');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('synthesized stack "demo" into cdktf.out');
    const doc = JSON.parse(readFileSync(join(r.dir, 'cdktf.out/stacks/demo/cdk.tf.json'), 'utf8'));
    expect(Object.keys(doc.resource.aws_eks_node_group)).toHaveLength(2);
    expect(doc.terraform.required_providers).toEqual({
      aws: { source: 'aws', version: '6.25.0' },
      helm: { source: 'helm', version: '3.1.1' },
    });
    // Nothing machine-specific in the output: the state path is relative.
    expect(JSON.stringify(doc)).not.toContain(r.dir);
    // The NodePools' local chart is copied next to the JSON, where terraform resolves its path.
    const nodePools = Object.values(
      doc.resource.helm_release as Record<string, { name: string; chart: string }>,
    ).find((x) => x.name === 'karpenter-node-pools');
    const chartDir = join(r.dir, 'cdktf.out/stacks/demo', String(nodePools?.chart));
    expect(readFileSync(join(chartDir, 'Chart.yaml'), 'utf8')).toContain('name: karpenter-node-pools');
    expect(readFileSync(join(chartDir, 'templates/manifests.yaml'), 'utf8')).toContain('.Values.manifests');
  });

  it('exits 1 with the list of problems for a bad configuration, writing nothing', () => {
    const r = run(
      'gpuNodeGroups:\n  - name: t4\n    instanceTypes: [g4dn.xlarge]\n    minSize: 3\n    maxSize: 1\n',
    );
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('invalid infrastructure configuration');
    expect(r.stderr).toContain('gpuNodeGroups.0: minSize (3) is greater than maxSize (1)');
    expect(r.stderr).toContain('"g4dn.xlarge" is not a supported GPU instance type');
    expect(() => readFileSync(join(r.dir, 'cdktf.out/manifest.json'))).toThrow();
  });
});
