// Small IAM helpers: a role that one AWS service may assume, with managed policies attached.
import { IamRole } from '@cdktf/provider-aws/lib/iam-role/index.js';
import { IamRolePolicyAttachment } from '@cdktf/provider-aws/lib/iam-role-policy-attachment/index.js';
import type { Construct } from 'constructs';

export const managedPolicy = (name: string): string => `arn:aws:iam::aws:policy/${name}`;

/** Attaches each policy ARN to the role; ids are derived from the ARN's last segment. */
export function attachPolicies(
  scope: Construct,
  role: IamRole,
  policyArns: string[],
): IamRolePolicyAttachment[] {
  return policyArns.map((arn) => {
    const suffix = arn.split('/').pop() ?? arn;
    return new IamRolePolicyAttachment(scope, `${role.node.id}-${suffix}`, {
      role: role.name,
      policyArn: arn,
    });
  });
}

/** A role plus its attachments: resources that use the role should depend on the attachments. */
export interface RoleWithPolicies {
  role: IamRole;
  attachments: IamRolePolicyAttachment[];
}

export function serviceRole(
  scope: Construct,
  id: string,
  name: string,
  service: string,
  policyArns: string[],
): RoleWithPolicies {
  const role = new IamRole(scope, id, {
    name,
    assumeRolePolicy: JSON.stringify({
      Version: '2012-10-17',
      Statement: [{ Effect: 'Allow', Principal: { Service: service }, Action: 'sts:AssumeRole' }],
    }),
  });
  return { role, attachments: attachPolicies(scope, role, policyArns) };
}
