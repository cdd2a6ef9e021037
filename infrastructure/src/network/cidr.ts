// IPv4 subnetting done at synth time, so the plan shows literal CIDRs and tests can assert them
// (Terraform's cidrsubnet() would leave only an expression in the JSON).

function toInt(ip: string): number {
  return ip.split('.').reduce((acc, octet) => acc * 256 + Number(octet), 0);
}

function toIp(n: number): string {
  return [24, 16, 8, 0].map((shift) => Math.floor(n / 2 ** shift) % 256).join('.');
}

/** Same contract as Terraform's cidrsubnet(prefix, newbits, netnum). */
export function cidrSubnet(prefix: string, newBits: number, netNum: number): string {
  const [ip = '', bitsText = ''] = prefix.split('/');
  const bits = Number(bitsText);
  const size = bits + newBits;
  if (size > 32) throw new RangeError(`${prefix} has no room for ${newBits} more bits`);
  if (netNum < 0 || netNum >= 2 ** newBits)
    throw new RangeError(`${prefix} + ${newBits} bits has no subnet ${netNum}`);
  const base = toInt(ip) - (toInt(ip) % 2 ** (32 - bits));
  return `${toIp(base + netNum * 2 ** (32 - size))}/${size}`;
}

/**
 * The VPC layout: the first three quarters hold one private subnet per AZ (nodes and, with the VPC
 * CNI, every pod IP, hence the size); the last quarter holds the small public subnets (NAT, load
 * balancers). For a /16: private /18s (16,379 usable IPs each) and public /22s.
 */
export function subnetLayout(
  vpcCidr: string,
  azCount: number,
): { privateCidrs: string[]; publicCidrs: string[] } {
  const index = [...Array(azCount).keys()];
  return {
    privateCidrs: index.map((i) => cidrSubnet(vpcCidr, 2, i)),
    publicCidrs: index.map((i) => cidrSubnet(vpcCidr, 6, 48 + i)),
  };
}
