// Where the chart and its tools live, and thin wrappers that run them as real processes.
// scripts/ensure-tools.sh installs the tools under <repo>/.toolchain before vitest starts.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const helmDir = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const repoRoot = resolve(helmDir, '..');
export const chartDir = join(helmDir, 'strata');
export const productionValues = join(chartDir, 'ci/production-values.yaml');
/** A GPU Operator cluster with a hardened runtime: no exporter of the chart's, admin-owned PriorityClasses. */
export const gpuOperatorValues = join(chartDir, 'ci/gpu-operator-values.yaml');
export const toolchain = join(repoRoot, '.toolchain');
export const helmBin = join(toolchain, 'bin/helm');
export const crdDir = join(toolchain, 'k8s-crds');
const kubernetesValidatePath = join(toolchain, 'python/kubernetes-validate');

/** The Kubernetes version the chart is rendered and validated for (the EKS default in infrastructure/). */
export const KUBE_VERSION = '1.34.0';

export interface RunResult {
  status: number;
  stdout: string;
  stderr: string;
}

function run(cmd: string, args: string[], env: NodeJS.ProcessEnv = process.env): RunResult {
  if (!existsSync(cmd) && cmd.includes('/'))
    throw new Error(`${cmd} is missing: run helm/scripts/ensure-tools.sh`);
  const r = spawnSync(cmd, args, { encoding: 'utf8', env, maxBuffer: 64 * 1024 * 1024 });
  if (r.error) throw r.error;
  return { status: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

/** helm with its own config/cache dirs in the toolchain, so nothing of the user's is read. */
export function helm(args: string[]): RunResult {
  const home = join(toolchain, 'helm-home');
  return run(helmBin, args, {
    ...process.env,
    HELM_CONFIG_HOME: join(home, 'config'),
    HELM_CACHE_HOME: join(home, 'cache'),
    HELM_DATA_HOME: join(home, 'data'),
  });
}

/** `helm template` of a chart folder with values files and --set pairs; throws with stderr on failure. */
export function template(
  opts: { chart?: string; values?: string[]; set?: string[]; release?: string } = {},
): string {
  const r = helmTemplate(opts);
  if (r.status !== 0) throw new Error(`helm template failed (${r.status}):\n${r.stderr}`);
  return r.stdout;
}

export function helmTemplate(
  opts: { chart?: string; values?: string[]; set?: string[]; release?: string } = {},
): RunResult {
  const args = ['template', opts.release ?? 'strata', opts.chart ?? chartDir, '--namespace', 'strata'];
  args.push('--kube-version', KUBE_VERSION);
  for (const v of opts.values ?? []) args.push('-f', v);
  for (const s of opts.set ?? []) args.push('--set', s);
  return helm(args);
}

/** kubernetes-validate (strict: unknown fields are errors) on a multi-document YAML file. */
export function kubernetesValidate(file: string): RunResult {
  return run('python3', ['-m', 'kubernetes_validate', '--strict', '--quiet', '-k', KUBE_VERSION, file], {
    ...process.env,
    PYTHONPATH: kubernetesValidatePath,
    PYTHONDONTWRITEBYTECODE: '1',
  });
}

/** strata-envoy-validate (helm/tools/envoy-validate): strict v3 Bootstrap decode + PGV rules. */
export function envoyValidate(bootstrapJson: string): RunResult {
  const bin = join(toolchain, 'bin/strata-envoy-validate');
  if (!existsSync(bin)) throw new Error(`${bin} is missing: run helm/scripts/ensure-tools.sh`);
  const r = spawnSync(bin, [], { input: bootstrapJson, encoding: 'utf8' });
  if (r.error) throw r.error;
  return { status: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}
