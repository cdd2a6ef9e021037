// EKS-managed add-ons. vpc-cni, kube-proxy and the pod identity agent are node prerequisites, so
// node groups wait for them; coredns and the EBS CSI driver run as Deployments and so wait for
// the system nodes (otherwise the add-on sits DEGRADED until the create times out).
import { EksAddon } from '@cdktf/provider-aws/lib/eks-addon/index.js';
import type { ITerraformDependable } from 'cdktf';
import { Construct } from 'constructs';
import type { InfraConfig } from '../config/schema.js';

type AddonName = InfraConfig['addons'][number]['name'];

export const NODE_PREREQUISITES: readonly AddonName[] = ['vpc-cni', 'kube-proxy', 'eks-pod-identity-agent'];

export interface AddonProps {
  clusterName: string;
  /** IRSA role per add-on, e.g. the EBS CSI controller's. */
  serviceAccountRoles: Partial<Record<AddonName, string>>;
}

export class StrataAddons extends Construct {
  readonly byName = new Map<AddonName, EksAddon>();
  private readonly config: InfraConfig;
  private readonly props: AddonProps;

  constructor(scope: Construct, id: string, config: InfraConfig, props: AddonProps) {
    super(scope, id);
    this.config = config;
    this.props = props;
  }

  /** Creates the configured add-ons of one phase; `after` are what they must wait for. */
  add(phase: 'before-nodes' | 'after-nodes', after: ITerraformDependable[] = []): EksAddon[] {
    const wanted = this.config.addons.filter(
      (a) => NODE_PREREQUISITES.includes(a.name) === (phase === 'before-nodes'),
    );
    return wanted.map((a) => {
      const roleArn = this.props.serviceAccountRoles[a.name];
      const addon = new EksAddon(this, a.name, {
        clusterName: this.props.clusterName,
        addonName: a.name,
        ...(a.version ? { addonVersion: a.version } : {}),
        ...(roleArn ? { serviceAccountRoleArn: roleArn } : {}),
        // Take over the self-managed copies EKS bootstraps; keep operators' edits on later updates.
        resolveConflictsOnCreate: 'OVERWRITE',
        resolveConflictsOnUpdate: 'PRESERVE',
        dependsOn: after,
      });
      this.byName.set(a.name, addon);
      return addon;
    });
  }
}
