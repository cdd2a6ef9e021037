// The request identity in the chart: one Secret of HMAC keys (generated, or the operator's),
// read by the edge, which signs, and by the router and the backends, which verify and by default
// refuse what is not signed.
import { describe, expect, it } from 'vitest';
import { byName, component, container, type K8sObject, ofKind, parseManifests } from './support/manifests.js';
import { helmTemplate, productionValues, template } from './support/tools.js';

type EnvVar = { name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } };
const env = (c: { env?: EnvVar[] }, name: string) => c.env?.find((e) => e.name === name);

/** The identity env of the edge, the router and every backend container. */
function identityEnv(docs: K8sObject[]) {
  const backends = ofKind(docs, 'Deployment').filter((d) => component(d) === 'backend');
  expect(backends.length).toBeGreaterThan(0);
  return [
    { who: 'edge', c: container(byName(docs, 'Deployment', 'strata-edge'), 'edge') },
    { who: 'router', c: container(byName(docs, 'Deployment', 'strata-router'), 'router') },
    ...backends.map((d) => ({ who: d.metadata.name, c: container(d, 'backend') })),
  ].map(({ who, c }) => ({
    who,
    keys: env(c, 'STRATA_IDENTITY_KEYS')?.valueFrom?.secretKeyRef,
    mode: env(c, 'STRATA_IDENTITY_MODE')?.value,
  }));
}

describe.each([
  { name: 'default', values: [] as string[] },
  { name: 'production', values: [productionValues] },
])('$name values', ({ values }) => {
  const docs = parseManifests(template({ values }));

  it('writes a Secret with one random key of 32 bytes', () => {
    const secret = byName(docs, 'Secret', 'strata-identity');
    const keys = Buffer.from(secret.data.keys, 'base64').toString('utf8');
    const m = /^(k\d{8}):([A-Za-z0-9+/]+=*)$/.exec(keys);
    expect(m, keys.slice(0, 12)).not.toBeNull();
    expect(Buffer.from(m?.[2] ?? '', 'base64')).toHaveLength(32);
    // Random per install (helm template has no cluster to look the old one up in).
    const again = byName(parseManifests(template({ values })), 'Secret', 'strata-identity');
    expect(again.data.keys).not.toBe(secret.data.keys);
  });

  it('gives the edge the keys, and the router and backends the keys and mode refuse', () => {
    for (const { who, keys, mode } of identityEnv(docs)) {
      expect(keys, who).toEqual({ name: 'strata-identity', key: 'keys' });
      expect(mode, who).toBe(who === 'edge' ? undefined : 'refuse');
    }
  });
});

describe('identity values', () => {
  it('uses an existing Secret instead of writing one, and takes mode anonymous', () => {
    const docs = parseManifests(
      template({ set: ['identity.existingSecret=my-identity', 'identity.mode=anonymous'] }),
    );
    expect(ofKind(docs, 'Secret').map((s) => s.metadata.name)).not.toContain('strata-identity');
    for (const { who, keys, mode } of identityEnv(docs)) {
      expect(keys, who).toEqual({ name: 'my-identity', key: 'keys' });
      expect(mode, who).toBe(who === 'edge' ? undefined : 'anonymous');
    }
  });

  it('refuses an unknown mode and an unknown key', () => {
    const mode = helmTemplate({ set: ['identity.mode=trust'] });
    expect(mode.status).not.toBe(0);
    expect(mode.stderr).toMatch(/identity\/mode|identity.mode/);
    const key = helmTemplate({ set: ['identity.key=x'] });
    expect(key.status).not.toBe(0);
    expect(key.stderr).toMatch(/additional properties 'key' not allowed/);
  });
});
