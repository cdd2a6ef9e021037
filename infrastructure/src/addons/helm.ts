// The one Helm provider of the stack: every helm_release (device plugin, load balancer controller,
// Karpenter) goes through it. Short-lived tokens from the AWS CLI at apply time; nothing
// long-lived lands in the state.
import type { EksCluster } from '@cdktf/provider-aws/lib/eks-cluster/index.js';
import { HelmProvider } from '@cdktf/provider-helm/lib/provider/index.js';
import { Fn } from 'cdktf';
import type { Construct } from 'constructs';
import { stringify } from 'yaml';
import type { InfraConfig } from '../config/schema.js';

export function clusterHelmProvider(
  scope: Construct,
  id: string,
  config: InfraConfig,
  cluster: EksCluster,
): HelmProvider {
  return new HelmProvider(scope, id, {
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
}

/**
 * Chart values as one YAML document. No line folding: values may hold Terraform references
 * (${aws_iam_role.x.arn}) that must stay on one line to be interpolated. No anchors for shared
 * objects either: each manifest reads on its own.
 */
export function helmValues(values: Record<string, unknown>): string {
  return stringify(values, { lineWidth: 0, aliasDuplicateObjects: false });
}
