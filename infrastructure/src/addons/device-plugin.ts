// The NVIDIA device plugin advertises nvidia.com/gpu on GPU nodes so pods can request GPUs.
// The AL2023 NVIDIA AMI ships the driver and container toolkit but not the plugin; Bottlerocket's
// NVIDIA variants run their own, so the DaemonSet is pinned to AL2023 GPU nodes only.

import type { EksCluster } from '@cdktf/provider-aws/lib/eks-cluster/index.js';
import { HelmProvider } from '@cdktf/provider-helm/lib/provider/index.js';
import { Release } from '@cdktf/provider-helm/lib/release/index.js';
import { Fn, type ITerraformDependable } from 'cdktf';
import { Construct } from 'constructs';
import { stringify } from 'yaml';
import { GPU_TAINT, LABELS } from '../cluster/node-groups.js';
import type { InfraConfig } from '../config/schema.js';

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
    props: { cluster: EksCluster; dependsOn: ITerraformDependable[] },
  ) {
    super(scope, id);
    const { cluster } = props;
    // Short-lived tokens from the AWS CLI at apply time; nothing long-lived lands in the state.
    const helm = new HelmProvider(this, 'helm', {
      kubernetes: {
        host: cluster.endpoint,
        clusterCaCertificate: Fn.base64decode(cluster.certificateAuthority.get(0).data),
        exec: {
          apiVersion: 'client.authentication.k8s.io/v1beta1',
          command: 'aws',
          args: ['eks', 'get-token', '--cluster-name', cluster.name, '--region', config.region],
        },
      },
    });
    this.release = new Release(this, 'release', {
      provider: helm,
      name: 'nvidia-device-plugin',
      repository: DEVICE_PLUGIN_REPOSITORY,
      chart: 'nvidia-device-plugin',
      version: config.nvidiaDevicePlugin.chartVersion,
      namespace: config.nvidiaDevicePlugin.namespace,
      createNamespace: config.nvidiaDevicePlugin.namespace !== 'kube-system',
      values: [stringify(devicePluginValues())],
      dependsOn: props.dependsOn,
    });
  }
}
