// Discovery per pool (fake watchers), pool membership, the routing file's `discovery` schema,
// and the router as the service builds it finding a backend through EndpointSlices. No
// Kubernetes cluster can run where these tests run, so the last test uses
// test/discovery/fake-apiserver.ts as a stand-in for the API server (list and watch only).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, createMetrics, loadConfig, Readiness } from '@strata/common';
import { afterEach, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { configEnv, configSchema } from '../../src/config.js';
import { type DiscoveredBackend, DiscoveredPools } from '../../src/discovery/index.js';
import { poolMembers } from '../../src/router/pool.js';
import { type PoolDiscovery, parseRoutingConfig, type RoutingConfig } from '../../src/routing/index.js';
import { buildRouterParts } from '../../src/wiring.js';
import { FakeBackend } from '../support/fake-backend.js';
import { captureLogger } from '../support/log.js';
import { FakeApiServer, waitFor } from './fake-apiserver.js';

const discovery = (service: string, port: string | number = 'http') => ({
  service,
  namespace: 'strata',
  port,
});

function routing(pools: Record<string, unknown>): RoutingConfig {
  return parseRoutingConfig({ pools, default: { pool: Object.keys(pools)[0] } }, 'test');
}

interface FakeWatcher {
  discovery: PoolDiscovery;
  emit: (backends: DiscoveredBackend[]) => void;
  started: boolean;
  stopped: boolean;
}

function fakeWatchers() {
  const made: FakeWatcher[] = [];
  const createWatcher = (d: PoolDiscovery, onChange: (b: DiscoveredBackend[]) => void) => {
    const w: FakeWatcher = { discovery: d, emit: onChange, started: false, stopped: false };
    made.push(w);
    return {
      start: () => {
        w.started = true;
      },
      stop: () => {
        w.stopped = true;
      },
    };
  };
  return { made, createWatcher };
}

describe('the routing file: pool discovery', () => {
  it('accepts a Service with a named or numbered port, namespace defaulting to "default"', () => {
    const config = routing({
      main: { discovery: { service: 'strata-backend-main', namespace: 'strata', port: 'http' } },
      both: {
        backends: [{ name: 'b1', url: 'http://127.0.0.1:8000' }],
        discovery: { service: 'x', port: 8000 },
      },
    });
    expect(config.pools.main).toEqual({
      backends: [],
      discovery: { service: 'strata-backend-main', namespace: 'strata', port: 'http' },
    });
    expect(config.pools.both?.discovery).toEqual({ service: 'x', namespace: 'default', port: 8000 });
  });

  it('rejects bad names, ports and unknown keys with their paths', () => {
    let error: unknown;
    try {
      routing({
        a: { discovery: { service: 'Bad_Name', port: 'http' } },
        b: { discovery: { service: 'ok', port: 0 } },
        c: { discovery: { service: 'ok', port: 'http', selector: 'x' } },
        d: { discovery: { port: 'http' } },
      });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const problems = (error as ConfigError).problems.join('\n');
    expect(problems).toMatch(/^pools\.a\.discovery\.service: must be a lower-case DNS label/m);
    expect(problems).toMatch(/^pools\.b\.discovery\.port: /m);
    expect(problems).toMatch(/^pools\.c\.discovery: .*selector/m);
    expect(problems).toMatch(/^pools\.d\.discovery\.service: /m);
  });
});

describe('poolMembers', () => {
  it('is the static backends plus the discovered ones', () => {
    const config = routing({ main: { backends: [{ name: 'b1', url: 'http://127.0.0.1:1' }] }, other: {} });
    const discovered = (pool: string) => (pool === 'main' ? ['pod-a', 'b1'] : []);
    expect([...poolMembers(config, 'main', discovered)]).toEqual(['b1', 'pod-a']);
    expect([...poolMembers(config, 'main')]).toEqual(['b1']);
    expect([...poolMembers(config, 'other', discovered)]).toEqual([]);
    expect([...poolMembers(config, 'missing', discovered)]).toEqual([]);
  });
});

describe('DiscoveredPools', () => {
  it('runs one watcher per discovering pool and follows reloads', () => {
    const { made, createWatcher } = fakeWatchers();
    let changes = 0;
    const pools = new DiscoveredPools({
      logger: captureLogger().logger,
      onChange: () => changes++,
      createWatcher,
    });
    pools.sync(
      routing({
        main: { discovery: discovery('svc-main') },
        side: { discovery: discovery('svc-side') },
        s: {},
      }),
    );
    expect(made.map((w) => [w.discovery.service, w.started])).toEqual([
      ['svc-main', true],
      ['svc-side', true],
    ]);
    const [main, side] = made;
    main?.emit([{ name: 'pod-a', url: 'http://10.0.0.1:8000' }]);
    side?.emit([
      { name: 'pod-a', url: 'http://10.0.0.1:8000' },
      { name: 'pod-s', url: 'http://10.0.0.2:8000' },
    ]);
    expect(changes).toBe(2);
    expect(pools.members('main')).toEqual(['pod-a']);
    expect(pools.members('side')).toEqual(['pod-a', 'pod-s']);
    expect(pools.members('s')).toEqual([]);
    expect(pools.backends().map((b) => b.name)).toEqual(['pod-a', 'pod-s']);

    // Reload: main unchanged (kept), side's port changed (restarted), then side removed.
    pools.sync(
      routing({
        main: { discovery: discovery('svc-main') },
        side: { discovery: discovery('svc-side', 9000) },
      }),
    );
    expect(made).toHaveLength(3);
    expect([main?.stopped, side?.stopped]).toEqual([false, true]);
    expect(changes).toBe(3); // side's backends went away with its old watcher
    expect(pools.members('side')).toEqual([]);
    side?.emit([{ name: 'late', url: 'http://10.0.0.3:8000' }]); // the stopped watcher is ignored
    expect(pools.members('side')).toEqual([]);
    pools.sync(routing({ main: { discovery: discovery('svc-main') } }));
    expect(made[2]?.stopped).toBe(true);
    expect(changes).toBe(3); // the new side watcher had found nothing yet
    pools.stop();
    expect(main?.stopped).toBe(true);
    expect(pools.backends()).toEqual([]);
  });

  it('logs and keeps going when a watcher cannot start (no cluster config)', () => {
    const { logger, lines } = captureLogger();
    const pools = new DiscoveredPools({
      logger,
      onChange: () => {},
      createWatcher: () => {
        throw new Error('no service account token');
      },
    });
    pools.sync(
      routing({
        main: { backends: [{ name: 'b1', url: 'http://127.0.0.1:1' }], discovery: discovery('svc') },
      }),
    );
    expect(pools.members('main')).toEqual([]);
    expect(lines.filter((l) => l.level === 'error').map((l) => [l.msg, l.err])).toEqual([
      [
        'cannot start Kubernetes discovery: the pool has only its static backends',
        'no service account token',
      ],
    ]);
  });
});

describe('the router with a discovering pool', () => {
  const cleanups: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
    cleanups.length = 0;
  });

  it('routes to a backend it found through EndpointSlices, and drops it when it is no longer ready', async () => {
    const api = new FakeApiServer('strata');
    await api.start();
    cleanups.push(() => api.close());
    const backend = await FakeBackend.start();
    cleanups.push(() => backend.close());
    const port = Number(new URL(backend.url).port);
    api.put({
      name: 'main-1',
      service: 'strata-backend-main',
      ports: [{ name: 'http', port }],
      endpoints: [{ ip: '127.0.0.1', pod: 'pod-a', ready: true }],
    });
    const dir = mkdtempSync(join(tmpdir(), 'strata-routes-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const routes = join(dir, 'routes.yaml');
    writeFileSync(
      routes,
      'pools:\n  main:\n    discovery: { service: strata-backend-main, namespace: strata, port: http }\ndefault: { pool: main }\n',
    );
    const config = loadConfig({
      schema: configSchema,
      envMap: configEnv,
      env: {
        STRATA_ROUTES_FILE: routes,
        KUBECONFIG: api.kubeconfigPath,
        STRATA_HEALTH_PROBE_INTERVAL_MS: '50',
      },
    });
    const { logger } = captureLogger();
    const metrics = createMetrics('router-service', { defaultMetrics: false });
    const parts = await buildRouterParts(config, logger, metrics.registry);
    cleanups.push(() => parts.close());
    const app = buildApp({ config, logger, metrics, readiness: new Readiness() }, parts.deps);
    cleanups.push(() => app.close());

    const tracked = () => parts.deps.tracker.get('pod-a');
    await waitFor(() => tracked()?.ready === true, 'pod-a discovered and probed ready');
    expect(tracked()?.url).toBe(backend.url);
    expect(parts.deps.discovered?.('main')).toEqual(['pod-a']);
    // The fake backend has no /v1/models: its 404 comes back through the router, from pod-a.
    const response = await app.inject({ method: 'GET', url: '/v1/models' });
    expect(response.statusCode).toBe(404);
    expect(response.headers['x-strata-backend']).toBe('pod-a');

    api.put({
      name: 'main-1',
      service: 'strata-backend-main',
      ports: [{ name: 'http', port }],
      endpoints: [{ ip: '127.0.0.1', pod: 'pod-a', ready: false, serving: true, terminating: true }],
    });
    await waitFor(() => tracked() === undefined, 'pod-a to leave the tracker');
    expect(parts.deps.discovered?.('main')).toEqual([]);
  });
});
