// The AWS Load Balancer Controller turns Envoy's LoadBalancer Service (annotated
// aws-load-balancer-type: external, nlb-target-type: ip in the chart's production values) into an
// NLB in the public subnets (tag kubernetes.io/role/elb) that targets the Envoy pods' IPs. Without
// it that Service stays <pending> (or gets a legacy in-tree load balancer): no public endpoint.
import type { IamOpenidConnectProvider } from '@cdktf/provider-aws/lib/iam-openid-connect-provider/index.js';
import type { HelmProvider } from '@cdktf/provider-helm/lib/provider/index.js';
import { Release } from '@cdktf/provider-helm/lib/release/index.js';
import type { ITerraformDependable } from 'cdktf';
import { Construct } from 'constructs';
import { IrsaRole } from '../cluster/irsa.js';
import { LABELS } from '../cluster/node-groups.js';
import type { InfraConfig } from '../config/schema.js';
import { helmValues } from './helm.js';
import { loadBalancerControllerPolicy } from './load-balancer-controller-policy.js';

export const LOAD_BALANCER_CONTROLLER = {
  repository: 'https://aws.github.io/eks-charts',
  chart: 'aws-load-balancer-controller',
  namespace: 'kube-system',
  serviceAccount: 'aws-load-balancer-controller',
} as const;

export interface LoadBalancerControllerProps {
  /** The EKS cluster's name (a reference, so the release waits for the cluster). */
  clusterName: string;
  vpcId: string;
  oidcProvider: IamOpenidConnectProvider;
  helm: HelmProvider;
  dependsOn: ITerraformDependable[];
}

/** Region and VPC are given, so the controller needs no instance metadata (IMDS hop limit 1). */
export function loadBalancerControllerValues(refs: {
  clusterName: string;
  region: string;
  vpcId: string;
  roleArn: string;
}): Record<string, unknown> {
  return {
    clusterName: refs.clusterName,
    region: refs.region,
    vpcId: refs.vpcId,
    serviceAccount: {
      create: true,
      name: LOAD_BALANCER_CONTROLLER.serviceAccount,
      annotations: { 'eks.amazonaws.com/role-arn': refs.roleArn },
    },
    // On system nodes (managed or Karpenter's system pool), never on GPU nodes.
    nodeSelector: { [LABELS.nodeRole]: 'system' },
  };
}

export class AwsLoadBalancerController extends Construct {
  readonly role: IrsaRole;
  readonly release: Release;

  constructor(scope: Construct, id: string, config: InfraConfig, props: LoadBalancerControllerProps) {
    super(scope, id);
    this.role = new IrsaRole(this, 'irsa', {
      // "<cluster>-aws-load-balancer-controller" would pass IAM's 64 characters for long cluster names.
      roleName: `${config.clusterName}-lb-controller`,
      oidcProvider: props.oidcProvider,
      namespace: LOAD_BALANCER_CONTROLLER.namespace,
      serviceAccount: LOAD_BALANCER_CONTROLLER.serviceAccount,
      inlinePolicy: JSON.stringify(loadBalancerControllerPolicy()),
    });
    this.release = new Release(this, 'release', {
      provider: props.helm,
      name: 'aws-load-balancer-controller',
      repository: LOAD_BALANCER_CONTROLLER.repository,
      chart: LOAD_BALANCER_CONTROLLER.chart,
      version: config.loadBalancerController.chartVersion,
      namespace: LOAD_BALANCER_CONTROLLER.namespace,
      values: [
        helmValues(
          loadBalancerControllerValues({
            clusterName: props.clusterName,
            region: config.region,
            vpcId: props.vpcId,
            roleArn: this.role.role.arn,
          }),
        ),
      ],
      dependsOn: [...props.dependsOn, ...this.role.grants],
    });
  }
}
