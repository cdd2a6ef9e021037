// The NVIDIA device plugin advertises nvidia.com/gpu on GPU nodes so pods can request GPUs.
// The AL2023 NVIDIA AMI ships the driver and container toolkit but not the plugin; Bottlerocket's
// NVIDIA variants run their own, so the DaemonSet is pinned to AL2023 GPU nodes only.

import type { HelmProvider } from '@cdktf/provider-helm/lib/provider/index.js';
import { Release } from '@cdktf/provider-helm/lib/release/index.js';
import type { ITerraformDependable } from 'cdktf';
import { Construct } from 'constructs';
import { GPU_TAINT, LABELS } from '../cluster/node-groups.js';
import type { InfraConfig } from '../config/schema.js';
import { helmValues } from './helm.js';

export const DEVICE_PLUGIN_REPOSITORY = 'https://nvidia.github.io/k8s-device-plugin';

/** The chart's values: our affinity replaces its default, which requires NFD labels we do not run. */
export function devicePluginValues(): Record<string, unknown> {
  return {
    priorityClassName: 'system-node-critical',
    affinity: {
      nodeAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: [
            {
              matchExpressions: [
                { key: LABELS.gpu, operator: 'In', values: ['true'] },
                { key: LABELS.gpuAmi, operator: 'In', values: ['al2023'] },
              ],
            },
          ],
        },
      },
    },
    tolerations: [
      { key: GPU_TAINT.key, operator: 'Exists', effect: 'NoSchedule' },
      { key: 'CriticalAddonsOnly', operator: 'Exists' },
    ],
  };
}

export function needsDevicePlugin(config: InfraConfig): boolean {
  return (
    config.nvidiaDevicePlugin.enabled &&
    config.gpuNodeGroups.some((g) => g.amiType === 'AL2023_x86_64_NVIDIA')
  );
}

export class NvidiaDevicePlugin extends Construct {
  readonly release: Release;

  constructor(
    scope: Construct,
    id: string,
    config: InfraConfig,
    props: { helm: HelmProvider; dependsOn: ITerraformDependable[] },
  ) {
    super(scope, id);
    this.release = new Release(this, 'release', {
      provider: props.helm,
      name: 'nvidia-device-plugin',
      repository: DEVICE_PLUGIN_REPOSITORY,
      chart: 'nvidia-device-plugin',
      version: config.nvidiaDevicePlugin.chartVersion,
      namespace: config.nvidiaDevicePlugin.namespace,
      createNamespace: config.nvidiaDevicePlugin.namespace !== 'kube-system',
      values: [helmValues(devicePluginValues())],
      dependsOn: props.dependsOn,
    });
  }
}
