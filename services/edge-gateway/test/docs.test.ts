// The edge's Swagger UI at /docs: public like /openapi.json (the API key guards the API routes
// only), served from the package's own assets, and reading the edge's /openapi.json.
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  INFERENCE_OPERATIONS,
  loadDocs,
  operationIdProblems,
  operationTable,
  swaggerUiProblems,
} from '@strata/common/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEdge, type TestEdge } from './support/edge.js';
import { jsonAnswer, RecordingUpstream } from './support/upstream.js';

const KEY = 'sk-docs';
const sha = (key: string) => `sha256:${createHash('sha256').update(key).digest('hex')}`;

let upstream: RecordingUpstream;
let edge: TestEdge;

beforeAll(async () => {
  upstream = await RecordingUpstream.start();
  upstream.answer = jsonAnswer(200, { object: 'list', data: [] });
  const tenantsFile = join(mkdtempSync(join(tmpdir(), 'edge-docs-')), 'tenants.yaml');
  writeFileSync(tenantsFile, `tenants:\n  - name: acme\n    keys: ["${sha(KEY)}"]\n`);
  edge = await startEdge({ STRATA_ROUTER_URL: upstream.url, STRATA_EDGE_TENANTS_FILE: tenantsFile });
});
afterAll(async () => {
  await edge?.close();
  await upstream?.close();
});

describe('edge /docs', () => {
  it('serves Swagger UI and its assets without an API key, reading the edge /openapi.json', async () => {
    const docs = await loadDocs(`${edge.url}/docs`);
    expect(swaggerUiProblems(docs, edge.url, 'Strata edge gateway')).toEqual([]);
    const own = await fetch(`${edge.url}/openapi.json`);
    expect(own.status).toBe(200);
    expect(docs.document).toEqual(await own.json());
    const doc = docs.document as { paths: Record<string, unknown>; components: Record<string, unknown> };
    // The docs' own routes stay out of the document; every operation is named once, the
    // inference ones as OpenAI names them, for client generators.
    expect(Object.keys(doc.paths)).toHaveLength(4);
    expect(operationIdProblems(doc)).toEqual([]);
    expect(operationTable(doc)).toEqual(INFERENCE_OPERATIONS);
    // The UI's Authorize button: the API routes take a bearer key.
    expect(doc.components.securitySchemes).toEqual({
      bearerAuth: { type: 'http', scheme: 'bearer', description: 'A tenant API key' },
    });
    // Nothing of it reached the router, and none of it counts as a rejection.
    expect(upstream.received).toEqual([]);
    expect(await edge.metric('strata_edge_rejections_total')).toBe(0);
  });

  it('still asks the API routes for a key', async () => {
    const anonymous = await fetch(`${edge.url}/v1/models`);
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('www-authenticate')).toBe('Bearer');
    expect(((await anonymous.json()) as { error: { code: string } }).error.code).toBe('STRATA_UNAUTHORIZED');
    expect(upstream.received).toEqual([]);

    const keyed = await fetch(`${edge.url}/v1/models`, { headers: { authorization: `Bearer ${KEY}` } });
    expect(keyed.status).toBe(200);
    expect(await keyed.json()).toEqual({ object: 'list', data: [] });
    expect(upstream.received.map((r) => r.path)).toEqual(['/v1/models']);
  });
});
