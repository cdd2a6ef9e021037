// IAM Roles for Service Accounts: a role that exactly one Kubernetes service account may assume,
// through the cluster's OIDC provider. The trust policy pins both the audience (sts) and the
// subject (system:serviceaccount:<namespace>:<name>), so no other pod can borrow the role.
import { DataAwsIamPolicyDocument } from '@cdktf/provider-aws/lib/data-aws-iam-policy-document/index.js';
import type { IamOpenidConnectProvider } from '@cdktf/provider-aws/lib/iam-openid-connect-provider/index.js';
import { IamRole } from '@cdktf/provider-aws/lib/iam-role/index.js';
import { IamRolePolicy } from '@cdktf/provider-aws/lib/iam-role-policy/index.js';
import { Fn, type ITerraformDependable } from 'cdktf';
import { Construct } from 'constructs';
import { attachPolicies } from './iam.js';

export interface IrsaRoleProps {
  roleName: string;
  oidcProvider: IamOpenidConnectProvider;
  namespace: string;
  serviceAccount: string;
  policyArns?: string[];
  /** An inline policy document (JSON), for permissions no managed policy covers. */
  inlinePolicy?: string;
}

export class IrsaRole extends Construct {
  readonly role: IamRole;
  /** "<namespace>/<serviceAccount>", what the chart must annotate with the role ARN. */
  readonly serviceAccountRef: string;
  /** The role's policy attachments and inline policy: what a workload using it should wait for. */
  readonly grants: ITerraformDependable[] = [];

  constructor(scope: Construct, id: string, props: IrsaRoleProps) {
    super(scope, id);
    // The provider's url attribute is the issuer without the scheme, which is how STS names the claims.
    const issuer = Fn.replace(props.oidcProvider.url, 'https://', '');
    const trust = new DataAwsIamPolicyDocument(this, 'trust', {
      statement: [
        {
          effect: 'Allow',
          actions: ['sts:AssumeRoleWithWebIdentity'],
          principals: [{ type: 'Federated', identifiers: [props.oidcProvider.arn] }],
          condition: [
            {
              test: 'StringEquals',
              variable: `${issuer}:sub`,
              values: [`system:serviceaccount:${props.namespace}:${props.serviceAccount}`],
            },
            { test: 'StringEquals', variable: `${issuer}:aud`, values: ['sts.amazonaws.com'] },
          ],
        },
      ],
    });
    this.role = new IamRole(this, 'role', { name: props.roleName, assumeRolePolicy: trust.json });
    this.grants.push(...attachPolicies(this, this.role, props.policyArns ?? []));
    if (props.inlinePolicy) {
      this.grants.push(
        new IamRolePolicy(this, 'inline', {
          role: this.role.name,
          name: props.roleName,
          policy: props.inlinePolicy,
        }),
      );
    }
    this.serviceAccountRef = `${props.namespace}/${props.serviceAccount}`;
  }
}
