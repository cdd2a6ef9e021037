// The EKS control plane and its OIDC identity provider. The provider is what IRSA roles trust:
// a pod's projected service-account token is exchanged for AWS credentials through it.
import { EksCluster } from '@cdktf/provider-aws/lib/eks-cluster/index.js';
import { IamOpenidConnectProvider } from '@cdktf/provider-aws/lib/iam-openid-connect-provider/index.js';
import { Construct } from 'constructs';
import type { InfraConfig } from '../config/schema.js';
import { managedPolicy, serviceRole } from './iam.js';

export class StrataCluster extends Construct {
  readonly cluster: EksCluster;
  readonly oidcProvider: IamOpenidConnectProvider;

  constructor(scope: Construct, id: string, config: InfraConfig, privateSubnetIds: string[]) {
    super(scope, id);
    const { clusterName, endpoint } = config;
    const { role, attachments } = serviceRole(
      this,
      'cluster-role',
      `${clusterName}-cluster`,
      'eks.amazonaws.com',
      [managedPolicy('AmazonEKSClusterPolicy')],
    );

    this.cluster = new EksCluster(this, 'cluster', {
      name: clusterName,
      version: config.kubernetesVersion,
      roleArn: role.arn,
      vpcConfig: {
        subnetIds: privateSubnetIds,
        endpointPrivateAccess: endpoint.privateAccess,
        endpointPublicAccess: endpoint.publicAccess,
        ...(endpoint.publicAccess ? { publicAccessCidrs: endpoint.publicAccessCidrs } : {}),
      },
      // Access entries (API) for new principals; the config map stays readable for older tooling.
      accessConfig: {
        authenticationMode: 'API_AND_CONFIG_MAP',
        bootstrapClusterCreatorAdminPermissions: true,
      },
      enabledClusterLogTypes: ['api', 'audit', 'authenticator'],
      // The policy attachment must exist before EKS uses the role, and must outlive the cluster on destroy.
      dependsOn: attachments,
    });

    // No thumbprint: IAM trusts the EKS OIDC issuers' CAs itself (thumbprint_list is optional since AWS provider 5).
    this.oidcProvider = new IamOpenidConnectProvider(this, 'oidc', {
      url: this.cluster.identity.get(0).oidc.get(0).issuer,
      clientIdList: ['sts.amazonaws.com'],
      tags: { Name: `${clusterName}-irsa` },
    });
  }
}
