import { Testing } from 'cdktf';
import { describe, expect, it } from 'vitest';
import { refOf, synth } from './helpers.js';

describe('VPC', () => {
  const s = synth({ clusterName: 'strata-test', region: 'us-east-2' });
  const subnets = s.all('aws_subnet');
  const privateSubnets = subnets.filter(
    (x) => (x.tags as Record<string, string>)['kubernetes.io/role/internal-elb'],
  );
  const publicSubnets = subnets.filter((x) => (x.tags as Record<string, string>)['kubernetes.io/role/elb']);

  it('creates one VPC with DNS support, which EKS needs for the private endpoint', () => {
    expect(
      Testing.toHaveResourceWithProperties(s.json, 'aws_vpc', {
        cidr_block: '10.0.0.0/16',
        enable_dns_hostnames: true,
        enable_dns_support: true,
      }),
    ).toBe(true);
    expect(s.all('aws_vpc')).toHaveLength(1);
  });

  it('puts one private and one public subnet in each of three AZs', () => {
    expect(subnets).toHaveLength(6);
    expect(privateSubnets.map((x) => x.availability_zone)).toEqual([
      'us-east-2a',
      'us-east-2b',
      'us-east-2c',
    ]);
    expect(publicSubnets.map((x) => x.availability_zone)).toEqual(['us-east-2a', 'us-east-2b', 'us-east-2c']);
    expect(privateSubnets.map((x) => x.cidr_block)).toEqual(['10.0.0.0/18', '10.0.64.0/18', '10.0.128.0/18']);
    expect(publicSubnets.map((x) => x.cidr_block)).toEqual([
      '10.0.192.0/22',
      '10.0.196.0/22',
      '10.0.200.0/22',
    ]);
    expect(privateSubnets.every((x) => x.map_public_ip_on_launch === undefined)).toBe(true);
    expect(publicSubnets.every((x) => x.map_public_ip_on_launch === true)).toBe(true);
  });

  it('tags every subnet for the cluster so load balancers find them', () => {
    for (const subnet of subnets) {
      expect(subnet.tags).toMatchObject({ 'kubernetes.io/cluster/strata-test': 'shared' });
    }
  });

  it('routes private subnets through the NAT gateway and public ones through the internet gateway', () => {
    const nat = s.all('aws_nat_gateway');
    expect(nat).toHaveLength(1);
    const natRef = `\${${refOf(s, 'aws_nat_gateway', nat[0] as Record<string, unknown>)}.id}`;
    const routes = s.all('aws_route');
    expect(routes.filter((r) => r.nat_gateway_id === natRef)).toHaveLength(3);
    const igw = s.all('aws_internet_gateway')[0] as Record<string, unknown>;
    expect(
      routes.filter((r) => r.gateway_id === `\${${refOf(s, 'aws_internet_gateway', igw)}.id}`),
    ).toHaveLength(1);
    expect(nat[0]?.subnet_id).toMatch(/^\$\{aws_subnet\.network_public-us-east-2a_\w+\.id\}$/);
  });

  it('creates one NAT gateway per AZ when asked', () => {
    const perAz = synth({ network: { natGateways: 'perAz' } });
    expect(perAz.all('aws_nat_gateway')).toHaveLength(3);
    expect(perAz.all('aws_eip')).toHaveLength(3);
    const natIds = new Set(
      perAz.all('aws_route').flatMap((r) => (r.nat_gateway_id ? [r.nat_gateway_id] : [])),
    );
    expect(natIds.size).toBe(3);
  });

  it('honours a custom CIDR and explicit AZs', () => {
    const custom = synth({
      network: { vpcCidr: '172.20.0.0/18', availabilityZones: ['us-west-2b', 'us-west-2c', 'us-west-2d'] },
    });
    const zones = custom.all('aws_subnet').map((x) => `${x.availability_zone} ${x.cidr_block}`);
    expect(zones).toContain('us-west-2d 172.20.32.0/20');
    expect(zones).toContain('us-west-2b 172.20.48.0/24');
  });
});
