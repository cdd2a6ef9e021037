// Runs the real script with --dry-run. No AWS account is reachable here, so lookups are made to
// fail deterministically (no credentials, no region, no instance metadata) when a test needs them.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const script = fileURLToPath(new URL('../scripts/gpu-scale.sh', import.meta.url));

function scale(args: string[], extraEnv: NodeJS.ProcessEnv = {}) {
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    AWS_CONFIG_FILE: '/nonexistent/aws-config',
    AWS_SHARED_CREDENTIALS_FILE: '/nonexistent/aws-credentials',
    AWS_EC2_METADATA_DISABLED: 'true',
    ...extraEnv,
  };
  const r = spawnSync('bash', [script, ...args], { env, encoding: 'utf8' });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('gpu-scale.sh --dry-run', () => {
  it('down prints one update per named group, zeroing min and desired and keeping max', () => {
    const r = scale(['down', 'strata', 'gpu-a10g', 'h100', '--dry-run', '--region', 'us-east-1']);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(
      [
        'aws eks update-nodegroup-config --cluster-name strata --nodegroup-name gpu-a10g --scaling-config minSize=0,desiredSize=0 --region us-east-1',
        'aws eks update-nodegroup-config --cluster-name strata --nodegroup-name h100 --scaling-config minSize=0,desiredSize=0 --region us-east-1',
        '',
      ].join('\n'),
    );
  });

  it('up restores the given sizes and leaves the region to the AWS CLI when not given', () => {
    const r = scale(['up', 'strata', 'gpu-a10g', '--min', '0', '--desired', '1', '--max', '3', '--dry-run']);
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(
      'aws eks update-nodegroup-config --cluster-name strata --nodegroup-name gpu-a10g --scaling-config minSize=0,maxSize=3,desiredSize=1\n',
    );
  });

  it('up without --max leaves maxSize as it is and min defaults to 0', () => {
    const r = scale(['up', 'strata', 'l4', '--desired', '2', '--dry-run']);
    expect(r.stdout).toBe(
      'aws eks update-nodegroup-config --cluster-name strata --nodegroup-name l4 --scaling-config minSize=0,desiredSize=2\n',
    );
  });

  it('quotes names that a shell would split when printing', () => {
    const r = scale(['down', "it's", 'gpu a', '--dry-run']);
    expect(r.stdout).toBe(
      "aws eks update-nodegroup-config --cluster-name 'it'\\''s' --nodegroup-name 'gpu a' --scaling-config minSize=0,desiredSize=0\n",
    );
  });

  it('rejects inconsistent sizes before printing anything', () => {
    const r = scale(['up', 'strata', 'g', '--min', '2', '--desired', '1', '--dry-run']);
    expect(r.status).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe('gpu-scale: g: min (2) is greater than desired (1)\n');
    const over = scale(['up', 'strata', 'g', '--desired', '5', '--max', '4', '--dry-run']);
    expect(over.stderr).toBe('gpu-scale: g: desired (5) is greater than max (4)\n');
    expect(scale(['up', 'strata', 'g', '--desired', 'two', '--dry-run']).stderr).toBe(
      "gpu-scale: sizes must be whole numbers, got 'two'\n",
    );
    expect(scale(['down', 'strata', 'g', '--min', '1', '--dry-run']).status).toBe(2);
  });

  it('prints usage for a missing action or cluster', () => {
    for (const args of [[], ['sideways', 'strata'], ['down']]) {
      const r = scale(args);
      expect(r.status).toBe(2);
      expect(r.stderr).toContain('gpu-scale.sh down <cluster> [nodegroup ...]');
    }
  });

  it('fails, printing no command, when sizes or group names must be looked up and AWS cannot answer', () => {
    for (const args of [
      ['up', 'strata', 'g', '--dry-run'],
      ['down', 'strata', '--dry-run'],
    ]) {
      const r = scale(args);
      expect(r.status).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr).not.toBe('');
    }
  });

  it('says the AWS CLI is needed when it is not installed', () => {
    const r = scale(['down', 'strata', '--dry-run'], { PATH: '/usr/bin:/bin' });
    if (spawnSync('bash', ['-c', 'command -v aws'], { env: { PATH: '/usr/bin:/bin' } }).status === 0) {
      expect(r.status).toBe(1); // an aws in /usr/bin: the lookup runs and fails without credentials
    } else {
      expect(r.stderr).toBe(
        "gpu-scale: the AWS CLI is needed to look up the node groups of strata; pass node group names (and for 'up' --min/--desired/--max) to work without it\n",
      );
    }
    expect(r.stdout).toBe('');
  });
});
