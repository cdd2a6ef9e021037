// Guards for how the package is put together: deep provider imports only (a package root pulls in
// all ~2,200 resource and data-source bindings of the AWS provider and makes tsc three times
// slower), and an example configuration that keeps parsing and synthesizing as the schema evolves.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { releaseValues, synth } from './helpers.js';

const root = fileURLToPath(new URL('..', import.meta.url));

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

describe('package layout', () => {
  it('imports provider bindings by deep path only', () => {
    const files = [...sources(join(root, 'src')), ...sources(join(root, 'test'))];
    expect(files.length).toBeGreaterThan(10);
    const offenders = files.filter((f) =>
      /from '@cdktf\/provider-[a-z]+(\/lib)?'/.test(readFileSync(f, 'utf8')),
    );
    expect(offenders).toEqual([]);
  });

  it('synthesizes the production example configuration', () => {
    const doc = parse(readFileSync(join(root, 'config/production.example.yaml'), 'utf8'));
    const s = synth(doc);
    expect(s.all('aws_nat_gateway')).toHaveLength(3);
    expect(
      s
        .all('aws_eks_node_group')
        .map((g) => g.node_group_name)
        .sort(),
    ).toEqual(['h100', 'l40s', 'system']);
    expect(s.one('aws_eks_node_group', 'node_group_name', 'h100').labels).toMatchObject({
      'nvidia.com/gpu.product': 'NVIDIA-H100-80GB-HBM3',
      'strata.dev/tier': 'large-models',
    });
    expect(s.terraform.backend).toMatchObject({
      s3: { bucket: 'acme-strata-tfstate', key: 'prod/eks.tfstate' },
    });
    const manifests = releaseValues(s, 'karpenter-node-pools').manifests as {
      kind: string;
      metadata: { name: string };
      spec: { amiSelectorTerms?: { alias: string }[] };
    }[];
    expect(manifests.filter((m) => m.kind === 'NodePool').map((m) => m.metadata.name)).toEqual([
      'l40s',
      'h100',
      'system',
    ]);
    for (const m of manifests.filter((x) => x.kind === 'EC2NodeClass')) {
      expect(m.spec.amiSelectorTerms).toEqual([{ alias: 'al2023@v20260714' }]);
    }
  });
});
