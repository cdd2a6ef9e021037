// Synthesizes a stack from a config document and returns the Terraform JSON as an object, plus
// small lookups by resource type. Every stack test goes through the real cdktf synthesizer.
import { Testing } from 'cdktf';
import { parse as parseYaml } from 'yaml';
import { parseInfraConfig } from '../src/config/load.js';
import type { InfraConfigInput } from '../src/config/schema.js';
import { StrataEksStack } from '../src/stack.js';

type Block = Record<string, Record<string, Record<string, unknown>>>;

export interface Synthesized {
  /** The raw JSON string, for cdktf's own matchers (Testing.toHaveResourceWithProperties). */
  json: string;
  resource: Block;
  data: Block;
  output: Record<string, { value: unknown; description?: string }>;
  provider: Record<string, Record<string, unknown>[]>;
  terraform: Record<string, unknown>;
  /** All resources of one type, as a list (their logical ids dropped). */
  all(type: string): Record<string, unknown>[];
  /** The resource of one type whose `field` equals `value`; throws when there is not exactly one. */
  one(type: string, field: string, value: unknown): Record<string, unknown>;
}

export function synth(input: InfraConfigInput = {}): Synthesized {
  const config = parseInfraConfig(input);
  const app = Testing.app();
  const stack = new StrataEksStack(app, config.clusterName, config);
  const json = Testing.synth(stack);
  const doc = JSON.parse(json) as Omit<Synthesized, 'json' | 'all' | 'one'>;
  const all = (type: string) => Object.values(doc.resource[type] ?? {});
  return {
    ...doc,
    data: doc.data ?? {},
    json,
    all,
    one(type, field, value) {
      const hits = all(type).filter((r) => JSON.stringify(r[field]) === JSON.stringify(value));
      if (hits.length !== 1) throw new Error(`${hits.length} ${type} with ${field}=${JSON.stringify(value)}`);
      return hits[0] as Record<string, unknown>;
    },
  };
}

/** The Terraform reference ("aws_x.logical_id") of the resource whose body is `body`. */
export function refOf(s: Synthesized, type: string, body: Record<string, unknown>): string {
  const entry = Object.entries(s.resource[type] ?? {}).find(([, b]) => b === body);
  if (!entry) throw new Error(`not a ${type} of this stack`);
  return `${type}.${entry[0]}`;
}

/** The trust policy statements (an aws_iam_policy_document) behind an IRSA role, and the role. */
export function trustOf(s: Synthesized, roleName: string) {
  const role = s.one('aws_iam_role', 'name', roleName);
  const match = /^\$\{data\.aws_iam_policy_document\.(.+)\.json\}$/.exec(String(role.assume_role_policy));
  if (!match?.[1])
    throw new Error(`${roleName} does not trust a policy document: ${role.assume_role_policy}`);
  const doc = s.data.aws_iam_policy_document?.[match[1]] as { statement: Record<string, unknown>[] };
  return { role, statements: doc.statement };
}

/** What an IRSA trust policy must say for one service account (see src/cluster/irsa.ts). */
export function irsaTrust(s: Synthesized, namespace: string, serviceAccount: string) {
  const oidc = s.all('aws_iam_openid_connect_provider')[0] as Record<string, unknown>;
  const oidcRef = refOf(s, 'aws_iam_openid_connect_provider', oidc);
  const issuer = `\${replace(${oidcRef}.url, "https://", "")}`;
  return [
    {
      effect: 'Allow',
      actions: ['sts:AssumeRoleWithWebIdentity'],
      principals: [{ type: 'Federated', identifiers: [`\${${oidcRef}.arn}`] }],
      condition: [
        {
          test: 'StringEquals',
          variable: `${issuer}:sub`,
          values: [`system:serviceaccount:${namespace}:${serviceAccount}`],
        },
        { test: 'StringEquals', variable: `${issuer}:aud`, values: ['sts.amazonaws.com'] },
      ],
    },
  ];
}

/** The parsed YAML values of the helm_release named `name`. */
export function releaseValues(s: Synthesized, name: string): Record<string, unknown> {
  const release = s.one('helm_release', 'name', name) as { values?: string[] };
  if (release.values?.length !== 1) throw new Error(`${name} should have one values document`);
  return parseYaml(release.values[0] as string) as Record<string, unknown>;
}
