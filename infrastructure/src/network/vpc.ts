// The network EKS needs: one VPC, a public and a private subnet in each of three AZs, an internet
// gateway, and NAT for the private subnets (one shared or one per AZ). Nodes live only in the
// private subnets; the public ones carry NAT gateways and internet-facing load balancers.
import { Eip } from '@cdktf/provider-aws/lib/eip/index.js';
import { InternetGateway } from '@cdktf/provider-aws/lib/internet-gateway/index.js';
import { NatGateway } from '@cdktf/provider-aws/lib/nat-gateway/index.js';
import { Route } from '@cdktf/provider-aws/lib/route/index.js';
import { RouteTable } from '@cdktf/provider-aws/lib/route-table/index.js';
import { RouteTableAssociation } from '@cdktf/provider-aws/lib/route-table-association/index.js';
import { Subnet } from '@cdktf/provider-aws/lib/subnet/index.js';
import { Vpc } from '@cdktf/provider-aws/lib/vpc/index.js';
import { Construct } from 'constructs';
import type { InfraConfig } from '../config/schema.js';
import { DISCOVERY_TAG } from '../karpenter/node-pools.js';
import { subnetLayout } from './cidr.js';

export class StrataNetwork extends Construct {
  readonly vpc: Vpc;
  readonly privateSubnets: Subnet[];
  readonly publicSubnets: Subnet[];

  constructor(scope: Construct, id: string, config: InfraConfig) {
    super(scope, id);
    const { clusterName } = config;
    const { availabilityZones: azs, vpcCidr, natGateways } = config.network;
    const { privateCidrs, publicCidrs } = subnetLayout(vpcCidr, azs.length);
    // Subnet discovery by the AWS Load Balancer Controller and EKS keys on these tags.
    const clusterTag = { [`kubernetes.io/cluster/${clusterName}`]: 'shared' };
    // Karpenter's EC2NodeClasses launch nodes into the subnets carrying this tag: the private ones.
    const karpenterTag: Record<string, string> = config.karpenter.enabled
      ? { [DISCOVERY_TAG]: clusterName }
      : {};

    this.vpc = new Vpc(this, 'vpc', {
      cidrBlock: vpcCidr,
      enableDnsHostnames: true, // EKS private endpoint and nodes resolve through VPC DNS
      enableDnsSupport: true,
      tags: { Name: `${clusterName}-vpc` },
    });
    const igw = new InternetGateway(this, 'igw', {
      vpcId: this.vpc.id,
      tags: { Name: `${clusterName}-igw` },
    });

    const publicRoutes = new RouteTable(this, 'public-rt', {
      vpcId: this.vpc.id,
      tags: { Name: `${clusterName}-public` },
    });
    new Route(this, 'public-default', {
      routeTableId: publicRoutes.id,
      destinationCidrBlock: '0.0.0.0/0',
      gatewayId: igw.id,
    });

    this.publicSubnets = azs.map(
      (az, i) =>
        new Subnet(this, `public-${az}`, {
          vpcId: this.vpc.id,
          availabilityZone: az,
          cidrBlock: publicCidrs[i] as string,
          mapPublicIpOnLaunch: true,
          tags: { Name: `${clusterName}-public-${az}`, 'kubernetes.io/role/elb': '1', ...clusterTag },
        }),
    );
    this.publicSubnets.forEach((subnet, i) => {
      new RouteTableAssociation(this, `public-rta-${i}`, {
        subnetId: subnet.id,
        routeTableId: publicRoutes.id,
      });
    });

    const natCount = natGateways === 'perAz' ? azs.length : 1;
    const nats = [...Array(natCount).keys()].map((i) => {
      const eip = new Eip(this, `nat-eip-${i}`, { domain: 'vpc', tags: { Name: `${clusterName}-nat-${i}` } });
      return new NatGateway(this, `nat-${i}`, {
        allocationId: eip.allocationId,
        subnetId: (this.publicSubnets[i] as Subnet).id,
        tags: { Name: `${clusterName}-nat-${i}` },
        dependsOn: [igw],
      });
    });

    this.privateSubnets = azs.map((az, i) => {
      const subnet = new Subnet(this, `private-${az}`, {
        vpcId: this.vpc.id,
        availabilityZone: az,
        cidrBlock: privateCidrs[i] as string,
        tags: {
          Name: `${clusterName}-private-${az}`,
          'kubernetes.io/role/internal-elb': '1',
          ...clusterTag,
          ...karpenterTag,
        },
      });
      const routes = new RouteTable(this, `private-rt-${i}`, {
        vpcId: this.vpc.id,
        tags: { Name: `${clusterName}-private-${az}` },
      });
      new Route(this, `private-default-${i}`, {
        routeTableId: routes.id,
        destinationCidrBlock: '0.0.0.0/0',
        natGatewayId: (nats[i % natCount] as NatGateway).id,
      });
      new RouteTableAssociation(this, `private-rta-${i}`, { subnetId: subnet.id, routeTableId: routes.id });
      return subnet;
    });
  }
}
