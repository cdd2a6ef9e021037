// The router's routing file that the chart generates is accepted by the router's own parser,
// and values.schema.json stops bad values before anything renders, with a message that names
// the field.
import { describe, expect, it } from 'vitest';
// The router's real parser (zod schema + cross-checks), not a re-statement of its format.
import { parseRoutingYaml } from '../../services/router-service/src/routing/rules.js';
import { byName, ofKind, parseManifests } from './support/manifests.js';
import { helmTemplate, productionValues, template } from './support/tools.js';

describe('generated routing file', () => {
  it.each([
    { name: 'default', values: [] as string[], models: ['llama-3-8b'] },
    { name: 'production', values: [productionValues], models: ['llama-3-8b', 'mistral-7b'] },
  ])('$name values: parses with the router and discovers each backend Service', ({ values, models }) => {
    const docs = parseManifests(template({ values }));
    const text = byName(docs, 'ConfigMap', 'strata-router-routes').data['routes.yaml'];
    const config = parseRoutingYaml(text, 'routes.yaml');
    expect(Object.keys(config.pools).sort()).toEqual([...models].sort());
    const services = new Set(ofKind(docs, 'Service').map((s) => s.metadata.name));
    for (const [name, pool] of Object.entries(config.pools)) {
      expect(pool.discovery).toEqual({
        service: `strata-backend-${name}`,
        namespace: 'strata',
        port: 'http',
      });
      expect(services.has(pool.discovery?.service as string)).toBe(true);
    }
    // One rule per model plus the default, which goes to the first model.
    expect(config.rules.map((r) => r.pool)).toEqual([...models, models[0]]);
  });

  it('writes router.routes verbatim when given', () => {
    const docs = parseManifests(
      template({
        set: [
          'router.routes.pools.x.backends[0].name=b',
          'router.routes.pools.x.backends[0].url=http://10.0.0.1:8000',
          'router.routes.default.pool=x',
        ],
      }),
    );
    const config = parseRoutingYaml(
      byName(docs, 'ConfigMap', 'strata-router-routes').data['routes.yaml'],
      'routes.yaml',
    );
    expect(config.pools.x?.backends).toEqual([{ name: 'b', url: 'http://10.0.0.1:8000' }]);
  });
});

describe('values.schema.json', () => {
  it.each([
    { set: ['edge.replica=2'], message: "at '/edge': additional properties 'replica' not allowed" },
    { set: ['models[0].name=Llama_3'], message: "at '/models/0/name'" },
    { set: ['envoy.streamIdleTimeout=5m'], message: "at '/envoy/streamIdleTimeout'" },
    { set: ['edge.quotaFailMode=maybe'], message: "at '/edge/quotaFailMode'" },
    { set: ['warmup.target=backend'], message: "at '/warmup/target'" },
    { set: ['redis.externalUrl=localhost:6379'], message: "at '/redis/externalUrl'" },
  ])('rejects $set with a message naming the field', ({ set, message }) => {
    const r = helmTemplate({ set });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain("values don't meet the specifications of the schema");
    expect(r.stderr).toContain(message);
  });

  it('rejects a values file with a misspelt top-level key and a model without GPUs', () => {
    const r = helmTemplate({ values: [productionValues], set: ['keda.enable=true', 'models[0].gpus=0'] });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain("at '/keda': additional properties 'enable' not allowed");
    expect(r.stderr).toContain("at '/models/0/gpus': minimum: got 0, want 1");
  });
});
