// One Terraform stack for one Strata environment: network -> cluster -> node prerequisites ->
// node groups -> add-ons that need nodes -> device plugin. The order is expressed with dependsOn
// so a single `terraform apply` brings the cluster up from an empty account.
import { AwsProvider } from '@cdktf/provider-aws/lib/provider/index.js';
import { LocalBackend, S3Backend, TerraformOutput, TerraformStack } from 'cdktf';
import type { Construct } from 'constructs';
import { NvidiaDevicePlugin, needsDevicePlugin } from './addons/device-plugin.js';
import { StrataAddons } from './addons/eks-addons.js';
import { clusterAutoscalerPolicy } from './cluster/autoscaler-policy.js';
import { StrataCluster } from './cluster/eks.js';
import { managedPolicy } from './cluster/iam.js';
import { IrsaRole } from './cluster/irsa.js';
import { StrataNodeGroups } from './cluster/node-groups.js';
import type { InfraConfig } from './config/schema.js';
import { StrataNetwork } from './network/vpc.js';

export class StrataEksStack extends TerraformStack {
  readonly network: StrataNetwork;
  readonly cluster: StrataCluster;
  readonly nodeGroups: StrataNodeGroups;
  readonly irsa: Map<string, IrsaRole> = new Map();

  constructor(scope: Construct, id: string, config: InfraConfig) {
    super(scope, id);
    const name = config.clusterName;
    new AwsProvider(this, 'aws', { region: config.region, defaultTags: [{ tags: config.tags }] });
    if (config.stateBackend) {
      const backend = new S3Backend(this, {
        bucket: config.stateBackend.bucket,
        key: config.stateBackend.key,
        region: config.stateBackend.region ?? config.region,
        encrypt: true,
      });
      // S3-native locking (Terraform >= 1.10); cdktf 0.21 predates the typed option.
      backend.addOverride('use_lockfile', true);
    } else {
      // Relative to cdktf.out/stacks/<stack>, where terraform runs: the package directory. cdktf's
      // default would bake this machine's absolute path into the JSON.
      new LocalBackend(this, { path: `../../../terraform.${id}.tfstate` });
    }

    this.network = new StrataNetwork(this, 'network', config);
    this.cluster = new StrataCluster(
      this,
      'eks',
      config,
      this.network.privateSubnets.map((s) => s.id),
    );
    const { cluster, oidcProvider } = this.cluster;

    const irsa = (key: string, props: Omit<ConstructorParameters<typeof IrsaRole>[2], 'oidcProvider'>) => {
      const role = new IrsaRole(this, `irsa-${key}`, { ...props, oidcProvider });
      this.irsa.set(key, role);
      return role;
    };
    const wantsEbs = config.addons.some((a) => a.name === 'aws-ebs-csi-driver');
    const ebs = wantsEbs
      ? irsa('ebs-csi', {
          roleName: `${name}-ebs-csi`,
          namespace: 'kube-system',
          serviceAccount: 'ebs-csi-controller-sa',
          policyArns: [managedPolicy('service-role/AmazonEBSCSIDriverPolicy')],
        })
      : undefined;
    const { clusterAutoscaler, router } = config.irsa;
    if (clusterAutoscaler.enabled) {
      irsa('cluster-autoscaler', {
        roleName: `${name}-cluster-autoscaler`,
        namespace: clusterAutoscaler.namespace,
        serviceAccount: clusterAutoscaler.serviceAccount,
        policyArns: clusterAutoscaler.policyArns,
        inlinePolicy: clusterAutoscalerPolicy(name),
      });
    }
    if (router.enabled) {
      irsa('router', {
        roleName: `${name}-router`,
        namespace: router.namespace,
        serviceAccount: router.serviceAccount,
        policyArns: router.policyArns,
      });
    }

    const addons = new StrataAddons(this, 'addons', config, {
      clusterName: cluster.name,
      serviceAccountRoles: ebs ? { 'aws-ebs-csi-driver': ebs.role.arn } : {},
    });
    const prerequisites = addons.add('before-nodes', [cluster]);
    this.nodeGroups = new StrataNodeGroups(this, 'nodes', config, {
      clusterName: cluster.name,
      subnetIds: this.network.privateSubnets.map((s) => s.id),
      dependsOn: [cluster, ...prerequisites],
    });
    addons.add('after-nodes', [this.nodeGroups.system]);

    if (needsDevicePlugin(config)) {
      new NvidiaDevicePlugin(this, 'nvidia-device-plugin', config, {
        cluster,
        dependsOn: [this.nodeGroups.system],
      });
    }

    new TerraformOutput(this, 'cluster_name', { value: cluster.name });
    new TerraformOutput(this, 'cluster_endpoint', { value: cluster.endpoint });
    new TerraformOutput(this, 'oidc_provider_arn', { value: oidcProvider.arn });
    new TerraformOutput(this, 'vpc_id', { value: this.network.vpc.id });
    new TerraformOutput(this, 'kubeconfig_command', {
      value: `aws eks update-kubeconfig --region ${config.region} --name ${name}`,
    });
    for (const [key, role] of this.irsa) {
      // Annotate the service account with this ARN (eks.amazonaws.com/role-arn).
      new TerraformOutput(this, `irsa_${key.replaceAll('-', '_')}_role_arn`, {
        value: role.role.arn,
        description: `IRSA role for ${role.serviceAccountRef}`,
      });
    }
    new TerraformOutput(this, 'gpu_node_groups', { value: config.gpuNodeGroups.map((g) => g.name) });
  }
}
