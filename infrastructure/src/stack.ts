// One Terraform stack for one Strata environment: network -> cluster -> node prerequisites ->
// node groups -> add-ons that need nodes -> Helm releases (device plugin; Karpenter, then the AWS
// Load Balancer Controller). The order is expressed with dependsOn so a single `terraform apply`
// brings the cluster up from an empty account.
import { AwsProvider } from '@cdktf/provider-aws/lib/provider/index.js';
import { LocalBackend, S3Backend, TerraformOutput, TerraformStack } from 'cdktf';
import type { Construct } from 'constructs';
import { NvidiaDevicePlugin, needsDevicePlugin } from './addons/device-plugin.js';
import { StrataAddons } from './addons/eks-addons.js';
import { clusterHelmProvider } from './addons/helm.js';
import { AwsLoadBalancerController } from './addons/load-balancer-controller.js';
import { clusterAutoscalerPolicy } from './cluster/autoscaler-policy.js';
import { StrataCluster } from './cluster/eks.js';
import { managedPolicy } from './cluster/iam.js';
import { IrsaRole } from './cluster/irsa.js';
import { modelReaderPolicy } from './cluster/model-reader-policy.js';
import { StrataNodeGroups } from './cluster/node-groups.js';
import type { InfraConfig } from './config/schema.js';
import { Karpenter } from './karpenter/karpenter.js';
import { StrataNetwork } from './network/vpc.js';

export class StrataEksStack extends TerraformStack {
  readonly network: StrataNetwork;
  readonly cluster: StrataCluster;
  readonly nodeGroups: StrataNodeGroups;
  readonly karpenter?: Karpenter;
  readonly loadBalancerController?: AwsLoadBalancerController;
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
    const { clusterAutoscaler, router, modelReader } = config.irsa;
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

    if (modelReader.enabled && modelReader.bucket) {
      irsa('model-reader', {
        roleName: `${name}-model-reader`,
        namespace: modelReader.namespace,
        serviceAccount: modelReader.serviceAccount,
        inlinePolicy: modelReaderPolicy(modelReader.bucket, modelReader.prefix),
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

    const wantsHelm =
      needsDevicePlugin(config) || config.karpenter.enabled || config.loadBalancerController.enabled;
    const helm = wantsHelm ? clusterHelmProvider(this, 'helm', config, cluster) : undefined;
    // Controllers need somewhere to run and DNS to reach AWS: the system nodes and CoreDNS.
    const coredns = addons.byName.get('coredns');
    const inCluster = [this.nodeGroups.system, ...(coredns ? [coredns] : [])];
    if (helm && needsDevicePlugin(config)) {
      new NvidiaDevicePlugin(this, 'nvidia-device-plugin', config, {
        helm,
        dependsOn: [this.nodeGroups.system],
      });
    }
    if (helm && config.karpenter.enabled) {
      this.karpenter = new Karpenter(this, 'karpenter', config, {
        cluster,
        oidcProvider,
        systemNodeGroupName: this.nodeGroups.system.nodeGroupName,
        helm,
        dependsOn: inCluster,
      });
    }
    if (helm && config.loadBalancerController.enabled) {
      // After Karpenter: the controller's Service webhook fails closed, so a chart creating a
      // Service (Karpenter's) while the controller's pods are still starting would be refused.
      this.loadBalancerController = new AwsLoadBalancerController(
        this,
        'aws-load-balancer-controller',
        config,
        {
          clusterName: cluster.name,
          vpcId: this.network.vpc.id,
          oidcProvider,
          helm,
          dependsOn: [...inCluster, ...(this.karpenter ? [this.karpenter.controller] : [])],
        },
      );
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
    if (this.karpenter) {
      new TerraformOutput(this, 'karpenter_node_role_arn', { value: this.karpenter.nodeRole.arn });
      new TerraformOutput(this, 'karpenter_interruption_queue', { value: this.karpenter.queue.name });
      new TerraformOutput(this, 'karpenter_node_pools', {
        value: this.karpenter.manifests.filter((m) => m.kind === 'NodePool').map((m) => m.metadata.name),
      });
    }
    if (this.loadBalancerController) {
      new TerraformOutput(this, 'aws_load_balancer_controller_role_arn', {
        value: this.loadBalancerController.role.role.arn,
      });
    }
  }
}
