// Library surface, for tests and for users who compose the stack into their own CDKTF app.
export { devicePluginValues, NvidiaDevicePlugin, needsDevicePlugin } from './addons/device-plugin.js';
export { StrataAddons } from './addons/eks-addons.js';
export { clusterHelmProvider } from './addons/helm.js';
export {
  AwsLoadBalancerController,
  loadBalancerControllerValues,
} from './addons/load-balancer-controller.js';
export {
  LOAD_BALANCER_CONTROLLER_POLICY_VERSION,
  loadBalancerControllerPolicy,
} from './addons/load-balancer-controller-policy.js';
export { IrsaRole } from './cluster/irsa.js';
export {
  GPU_TAINT,
  gpuLabels,
  gpuNodeLabels,
  LABELS,
  SCALE_TAGS,
  StrataNodeGroups,
} from './cluster/node-groups.js';
export { describeGpuInstance, GPU_FAMILIES } from './config/gpu-instances.js';
export {
  CONFIG_FILE_ENV,
  ENV_OVERRIDES,
  InfraConfigError,
  loadInfraConfig,
  parseInfraConfig,
} from './config/load.js';
export type { GpuNodeGroupConfig, InfraConfig, InfraConfigInput } from './config/schema.js';
export { Karpenter, karpenterValues } from './karpenter/karpenter.js';
export {
  DISCOVERY_TAG,
  ec2NodeClass,
  gpuNodePool,
  karpenterManifests,
  systemNodePool,
} from './karpenter/node-pools.js';
export { karpenterControllerPolicy } from './karpenter/policy.js';
export { cidrSubnet, subnetLayout } from './network/cidr.js';
export { StrataNetwork } from './network/vpc.js';
export { StrataEksStack } from './stack.js';
