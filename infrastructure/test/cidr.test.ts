import { describe, expect, it } from 'vitest';
import { cidrSubnet, subnetLayout } from '../src/network/cidr.js';

describe('cidrSubnet (same results as Terraform cidrsubnet)', () => {
  it('splits a /16 into quarters and /22s', () => {
    expect(cidrSubnet('10.0.0.0/16', 2, 0)).toBe('10.0.0.0/18');
    expect(cidrSubnet('10.0.0.0/16', 2, 1)).toBe('10.0.64.0/18');
    expect(cidrSubnet('10.0.0.0/16', 6, 48)).toBe('10.0.192.0/22');
    expect(cidrSubnet('10.0.0.0/16', 6, 50)).toBe('10.0.200.0/22');
  });

  it('normalizes host bits and crosses octets', () => {
    expect(cidrSubnet('172.16.5.9/20', 2, 3)).toBe('172.16.12.0/22');
    expect(cidrSubnet('192.168.0.0/16', 8, 255)).toBe('192.168.255.0/24');
  });

  it('refuses subnets that do not fit', () => {
    expect(() => cidrSubnet('10.0.0.0/30', 4, 0)).toThrow(RangeError);
    expect(() => cidrSubnet('10.0.0.0/16', 2, 4)).toThrow('has no subnet 4');
  });

  it('lays out three private quarters and three public /22s that do not overlap', () => {
    expect(subnetLayout('10.0.0.0/16', 3)).toEqual({
      privateCidrs: ['10.0.0.0/18', '10.0.64.0/18', '10.0.128.0/18'],
      publicCidrs: ['10.0.192.0/22', '10.0.196.0/22', '10.0.200.0/22'],
    });
  });
});
