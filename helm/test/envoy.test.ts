// The envoy.yaml the chart renders. No Envoy binary runs here, so the config is checked two
// ways: decoded strictly into Envoy's v3 Bootstrap with its declared constraints
// (strata-envoy-validate, built from go-control-plane), and walked for the structure and
// values docs/kubernetes.md promises: listeners -> filter chains -> HCM -> routes -> clusters.
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { byName, container, type K8sObject, parseManifests, podSpec } from './support/manifests.js';
import { envoyValidate, productionValues, template } from './support/tools.js';

// biome-ignore lint/suspicious/noExplicitAny: the bootstrap is walked field by field.
type Json = any;

function envoyConfig(docs: K8sObject[]): Json {
  return parse(byName(docs, 'ConfigMap', 'strata-envoy').data['envoy.yaml']);
}

const HCM =
  'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager';

function hcmOf(listener: Json): Json {
  const chain = listener.filter_chains[0];
  const f = chain.filters.find((x: Json) => x.name === 'envoy.filters.network.http_connection_manager');
  expect(f.typed_config['@type']).toBe(HCM);
  return f.typed_config;
}

/** Every "@type" anywhere in the tree. */
function typeUrls(node: Json, out: string[] = []): string[] {
  if (Array.isArray(node)) for (const x of node) typeUrls(x, out);
  else if (node && typeof node === 'object') {
    for (const [k, v] of Object.entries(node)) {
      if (k === '@type') out.push(v as string);
      else typeUrls(v, out);
    }
  }
  return out;
}

describe.each([
  { name: 'default', values: [] as string[], listeners: ['http', 'stats'] },
  { name: 'production', values: [productionValues], listeners: ['https', 'http', 'stats'] },
])('$name values', ({ values, listeners }) => {
  const docs = parseManifests(template({ values }));
  const cfg = envoyConfig(docs);
  const publicListeners = cfg.static_resources.listeners.filter((l: Json) => l.name !== 'stats');

  it("decodes strictly as Envoy's v3 Bootstrap and meets its declared constraints", () => {
    const r = envoyValidate(JSON.stringify(cfg));
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toBe('ok');
    expect(r.status).toBe(0);
  });

  it('names only Envoy v3 extension types', () => {
    const urls = typeUrls(cfg);
    expect(urls.length).toBeGreaterThan(5);
    for (const u of urls)
      expect(u).toMatch(/^type\.googleapis\.com\/envoy\.extensions\.[a-z_.]+\.v3\.[A-Z][A-Za-z]+$/);
  });

  it('has the listeners of its values, each route pointing at a cluster that exists', () => {
    expect(cfg.static_resources.listeners.map((l: Json) => l.name)).toEqual(listeners);
    const clusters = new Set(cfg.static_resources.clusters.map((c: Json) => c.name));
    for (const l of cfg.static_resources.listeners) {
      for (const vh of hcmOf(l).route_config.virtual_hosts) {
        for (const r of vh.routes) {
          if (r.route) expect(clusters.has(r.route.cluster), `${l.name} -> ${r.route.cluster}`).toBe(true);
          else expect(r.direct_response).toBeDefined();
        }
      }
    }
  });

  it('serves HTTP/1.1 and HTTP/2 with limits and SSE-friendly timeouts on every public listener', () => {
    for (const l of publicListeners) {
      const [limit] = l.filter_chains[0].filters;
      expect(limit.name).toBe('envoy.filters.network.connection_limit');
      expect(limit.typed_config.max_connections).toBeGreaterThan(0);
      const hcm = hcmOf(l);
      expect(hcm.codec_type).toBe('AUTO');
      expect(hcm.max_request_headers_kb).toBe(60);
      expect(hcm.request_headers_timeout).toBe('10s');
      expect(hcm.stream_idle_timeout).toBe('300s');
      // Receiving the request is bounded; the route has no deadline, so a stream lasts as long
      // as tokens flow (request_timeout stops once the response starts).
      expect(hcm.request_timeout).toBe('30s');
      const edgeRoute = hcm.route_config.virtual_hosts[0].routes.find(
        (r: Json) => r.route?.cluster === 'edge',
      );
      expect(edgeRoute.route.timeout).toBe('0s');
      expect(edgeRoute.match).toEqual({ prefix: '/' });
      // Request ids: generated when absent, a client's kept, echoed back.
      expect(hcm.generate_request_id).toBe(true);
      expect(hcm.preserve_external_request_id).toBe(true);
      expect(hcm.route_config.request_headers_to_remove).toContain('x-strata-tenant');
      // /metrics never answers from the public side.
      const metrics = hcm.route_config.virtual_hosts[0].routes[0];
      expect(metrics).toMatchObject({ match: { path: '/metrics' }, direct_response: { status: 404 } });
    }
  });

  it('rate-limits globally before routing and logs JSON with request id and traceparent', () => {
    for (const l of publicListeners) {
      const hcm = hcmOf(l);
      expect(hcm.http_filters.map((f: Json) => f.name)).toEqual([
        'envoy.filters.http.local_ratelimit',
        'envoy.filters.http.router',
      ]);
      const rl = hcm.http_filters[0].typed_config;
      expect(rl.token_bucket).toEqual({
        max_tokens: expect.any(Number),
        tokens_per_fill: expect.any(Number),
        fill_interval: expect.stringMatching(/s$/),
      });
      expect(rl.filter_enforced.default_value).toEqual({ numerator: 100, denominator: 'HUNDRED' });
      const [log] = hcm.access_log;
      expect(log.typed_config['@type']).toBe(
        'type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog',
      );
      expect(log.typed_config.log_format.json_format).toMatchObject({
        request_id: '%REQ(X-REQUEST-ID)%',
        traceparent: '%REQ(TRACEPARENT)%',
        status: '%RESPONSE_CODE%',
      });
    }
  });

  it('caps connections process-wide with the overload manager', () => {
    const monitors = cfg.overload_manager.resource_monitors.map((m: Json) => m.name);
    expect(monitors).toContain('envoy.resource_monitors.global_downstream_max_connections');
    const actions = cfg.overload_manager.actions.map((a: Json) => a.name);
    expect(actions).toContain('envoy.overload_actions.stop_accepting_requests');
  });

  it('forwards to the edge headless Service with active /health/ready checks', () => {
    const edge = cfg.static_resources.clusters.find((c: Json) => c.name === 'edge');
    expect(edge.type).toBe('STRICT_DNS');
    const addr = edge.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address;
    expect(addr).toEqual({ address: 'strata-edge-headless.strata.svc.cluster.local', port_value: 8080 });
    const headless = byName(docs, 'Service', 'strata-edge-headless');
    expect(headless.spec.clusterIP).toBe('None');
    expect(headless.spec.ports[0].port).toBe(8080);
    const [hc] = edge.health_checks;
    expect(hc.http_health_check).toEqual({ path: '/health/ready', codec_client_type: 'HTTP1' });
    expect(hc.unhealthy_threshold).toBeGreaterThan(0);
  });

  it('keeps the admin API on loopback and exposes only /stats/prometheus and /ready', () => {
    expect(cfg.admin.address.socket_address.address).toBe('127.0.0.1');
    const stats = cfg.static_resources.listeners.find((l: Json) => l.name === 'stats');
    const paths = hcmOf(stats).route_config.virtual_hosts[0].routes.map((r: Json) => r.match.path);
    expect(paths).toEqual(['/stats/prometheus', '/ready']);
    const d = byName(docs, 'Deployment', 'strata-envoy');
    const c = container(d, 'envoy');
    expect(c.readinessProbe.httpGet).toEqual({ path: '/ready', port: 'stats' });
    // The ports the listeners bind are the ports the container declares.
    const declared = c.ports.map((p: { containerPort: number }) => p.containerPort).sort();
    const bound = cfg.static_resources.listeners.map((l: Json) => l.address.socket_address.port_value).sort();
    expect(declared).toEqual(bound);
    expect(podSpec(d).volumes.find((v: Json) => v.name === 'config').configMap.name).toBe('strata-envoy');
  });
});

describe('TLS listener', () => {
  const docs = parseManifests(template({ values: [productionValues] }));
  const https = envoyConfig(docs).static_resources.listeners.find((l: Json) => l.name === 'https');

  it('terminates TLS with ALPN h2 and http/1.1 from the mounted Secret', () => {
    const ts = https.filter_chains[0].transport_socket;
    expect(ts.typed_config['@type']).toBe(
      'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext',
    );
    const ctx = ts.typed_config.common_tls_context;
    expect(ctx.alpn_protocols).toEqual(['h2', 'http/1.1']);
    expect(ctx.tls_certificates[0]).toEqual({
      certificate_chain: { filename: '/etc/envoy/tls/tls.crt' },
      private_key: { filename: '/etc/envoy/tls/tls.key' },
    });
    const mount = container(byName(docs, 'Deployment', 'strata-envoy'), 'envoy').volumeMounts.find(
      (m: Json) => m.name === 'tls',
    );
    expect(mount).toEqual({ name: 'tls', mountPath: '/etc/envoy/tls', readOnly: true });
  });
});

describe('the validator itself', () => {
  const cfg = envoyConfig(parseManifests(template()));
  it('rejects an unknown field, an unknown @type and a value outside Envoy’s range', () => {
    const text = JSON.stringify(cfg);
    const typo = envoyValidate(text.replace('"stream_idle_timeout"', '"stream_idle_timout"'));
    expect(typo.status).toBe(1);
    expect(typo.stderr).toContain('unknown field "stream_idle_timout"');
    const badType = envoyValidate(text.replace('router.v3.Router', 'router.v3.Routr'));
    expect(badType.stderr).toContain('unable to resolve');
    const range = envoyValidate(text.replace('"max_request_headers_kb":60', '"max_request_headers_kb":9000'));
    expect(range.stderr).toContain('MaxRequestHeadersKb: value must be inside range');
  });
});
