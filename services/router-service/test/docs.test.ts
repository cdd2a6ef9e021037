// The router's OpenAPI document and Swagger UI (/openapi.json, /docs), on a real listening
// router in front of a real HTTP backend that records what reaches it: the route schemas only
// describe the API, bodies still go through as sent.
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  INFERENCE_OPERATIONS,
  idleLoadReport,
  loadDocs,
  operationIdProblems,
  operationTable,
  swaggerUiProblems,
} from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestRouter, type TestRouter } from './support/router.js';

interface Received {
  path: string;
  contentType: string | undefined;
  body: string;
}

/** A backend that is ready, idle, and answers every inference request with 200 {"ok":true}. */
async function startRecordingBackend(): Promise<{ url: string; received: Received[]; server: http.Server }> {
  const received: Received[] = [];
  const server = http.createServer(async (req, res) => {
    if (req.url === '/health/ready') {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ready":true}');
    } else if (req.url === '/load') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ ...idleLoadReport('m'), timestamp_ms: Date.now() }));
    } else {
      let body = '';
      for await (const chunk of req) body += chunk;
      received.push({ path: req.url ?? '', contentType: req.headers['content-type'], body });
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
    }
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, received, server };
}

/** A reverse proxy that serves `target` under `prefix` and strips it, as path-based routing does. */
async function startPrefixProxy(
  target: string,
  prefix: string,
): Promise<{ url: string; server: http.Server }> {
  const server = http.createServer(async (req, res) => {
    const path = req.url ?? '';
    if (!path.startsWith(`${prefix}/`)) {
      res.writeHead(404).end();
      return;
    }
    const upstream = await fetch(`${target}${path.slice(prefix.length)}`, { redirect: 'manual' });
    const headers: Record<string, string> = {};
    for (const name of ['content-type', 'location']) {
      const value = upstream.headers.get(name);
      if (value !== null) headers[name] = value;
    }
    res.writeHead(upstream.status, headers).end(Buffer.from(await upstream.arrayBuffer()));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

async function startRouter(backendUrl: string): Promise<TestRouter & { url: string }> {
  const router = await buildTestRouter({ STRATA_BACKEND_URL: backendUrl }, ['local']);
  await router.app.listen({ host: '127.0.0.1', port: 0 });
  return { ...router, url: `http://127.0.0.1:${(router.app.server.address() as AddressInfo).port}` };
}

let backend: Awaited<ReturnType<typeof startRecordingBackend>>;
let router: Awaited<ReturnType<typeof startRouter>>;
let proxy: Awaited<ReturnType<typeof startPrefixProxy>>;

beforeAll(async () => {
  backend = await startRecordingBackend();
  router = await startRouter(backend.url);
  proxy = await startPrefixProxy(router.url, '/strata');
});

afterAll(async () => {
  proxy?.server.close();
  await router?.close();
  backend?.server.close();
});

// biome-ignore lint/suspicious/noExplicitAny: the document is checked field by field
const openApi = async (base: string): Promise<any> => (await fetch(`${base}/openapi.json`)).json();

describe('router OpenAPI document', () => {
  it('describes the proxied inference routes with the shared request and response schemas', async () => {
    const doc = await openApi(router.url);
    expect(doc.openapi).toBe('3.1.0');
    expect(doc.info).toEqual({ title: 'Strata router', version: '0.1.0' });
    expect(Object.keys(doc.paths)).toEqual([
      '/v1/generate',
      '/v1/completions',
      '/v1/chat/completions',
      '/v1/models',
    ]);
    for (const route of ['/v1/generate', '/v1/completions', '/v1/chat/completions']) {
      const op = doc.paths[route].post;
      expect(op.tags, route).toEqual(['inference']);
      expect(op.summary, route).toBeTypeOf('string');
      expect(op.requestBody.content['application/json'].schema.type, route).toBe('object');
      expect(Object.keys(op.responses['200'].content), route).toEqual([
        'application/json',
        'text/event-stream',
      ]);
      expect(op.responses['503'], route).toBeDefined();
    }
    expect(
      doc.paths['/v1/chat/completions'].post.requestBody.content['application/json'].schema.required,
    ).toEqual(['messages']);
    expect(doc.paths['/v1/generate'].post.requestBody.content['application/json'].schema.required).toEqual([
      'prompt',
    ]);
    expect(doc.paths['/v1/models'].get.tags).toEqual(['inference']);
  });

  it('forwards bodies the schemas would refuse exactly as sent: the router does not validate', async () => {
    const bodies = {
      '/v1/chat/completions': '{"model":null,"messages":[],"surprise":{"x":[1,2]}}',
      '/v1/generate': '{"prompt":"","unknown_field":true,"max_tokens":-3}',
      '/v1/completions': '{"prompt":42}',
    };
    for (const [path, body] of Object.entries(bodies)) {
      const res = await fetch(`${router.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      });
      expect(res.status, path).toBe(200);
      expect(await res.json(), path).toEqual({ ok: true });
      expect(backend.received.at(-1), path).toEqual({ path, contentType: 'application/json', body });
    }
  });

  it('answers its own errors as before, catalogue body and all', async () => {
    const res = await fetch(`${router.url}/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"prompt":',
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({
      error: { code: 'STRATA_INVALID_JSON', message: expect.any(String), type: 'invalid_request' },
    });
  });
});

describe('router /docs', () => {
  it('serves Swagger UI, its assets from the package, reading the router /openapi.json', async () => {
    const docs = await loadDocs(`${router.url}/docs`);
    // Relative links only: nothing from another host, and the page works under a path prefix.
    expect(swaggerUiProblems(docs, router.url, 'Strata router')).toEqual([]);
    expect(docs.document).toEqual(await openApi(router.url));
  });

  it('names every operation once, the inference ones as OpenAI does, for client generators', async () => {
    const document = await openApi(router.url);
    expect(operationIdProblems(document)).toEqual([]);
    expect(operationTable(document)).toEqual(INFERENCE_OPERATIONS);
  });

  it('keeps its own routes out of the document', async () => {
    const paths = Object.keys((await openApi(router.url)).paths);
    expect(paths.filter((p) => p.startsWith('/docs') || p === '/openapi.json')).toEqual([]);
  });

  it('sends /docs/ to /docs with a relative redirect, query kept', async () => {
    const res = await fetch(`${router.url}/docs/?urls.primaryName=x`, { redirect: 'manual' });
    expect(res.status).toBe(302);
    expect(res.headers.get('location')).toBe('../docs?urls.primaryName=x');
  });

  it('works behind a proxy that serves the router under a path prefix', async () => {
    const docs = await loadDocs(`${proxy.url}/strata/docs`);
    expect(swaggerUiProblems(docs, `${proxy.url}/strata`, 'Strata router')).toEqual([]);
    expect(docs.document).toEqual(await openApi(router.url));
    const slash = await fetch(`${proxy.url}/strata/docs/`, { redirect: 'manual' });
    expect(new URL(slash.headers.get('location') ?? '', `${proxy.url}/strata/docs/`).href).toBe(
      `${proxy.url}/strata/docs`,
    );
  });
});
