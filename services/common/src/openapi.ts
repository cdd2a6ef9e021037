// The OpenAPI document of the service, generated from the route schemas by @fastify/swagger and
// served at GET /openapi.json, and interactive docs (Swagger UI) for it at GET /docs. Inference
// routes carry zod schemas (turned into JSON Schema by fastify-type-provider-zod); the service
// base's routes carry plain JSON Schema, used as is.
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';
import { jsonSchemaTransform } from 'fastify-type-provider-zod';

type Transform = NonNullable<Parameters<typeof jsonSchemaTransform>[0]>;

/** Where Swagger UI is served; its assets are under DOCS_PATH/static/. */
export const DOCS_PATH = '/docs';

const isZod = (value: unknown): boolean => typeof value === 'object' && value !== null && '_zod' in value;

/** True when any part of a route schema (body, querystring, params, headers, a response) is zod. */
function hasZodSchema(schema: Transform['schema']): boolean {
  const { response, ...parts } = schema;
  const responses = typeof response === 'object' && response !== null ? Object.values(response) : [];
  return [...Object.values(parts), ...responses].some(isZod);
}

/** OpenAI's names for the operations it defines, so clients generated from any service read alike. */
const OPERATION_IDS: Record<string, string> = {
  'POST /v1/completions': 'createCompletion',
  'POST /v1/chat/completions': 'createChatCompletion',
  'GET /v1/models': 'listModels',
  'POST /v1/generate': 'generate',
};

/**
 * Every operation's operationId (what client generators name methods after): the route's own,
 * OpenAI's name, else method and path in camel case (GET /health/live -> getHealthLive).
 */
export function operationIdOf(method: string, url: string): string {
  const known = OPERATION_IDS[`${method} ${url}`];
  if (known) return known;
  const words = url.split(/[^A-Za-z0-9]+/).filter(Boolean);
  return [method.toLowerCase(), ...words.map((w) => w[0]?.toUpperCase() + w.slice(1))].join('');
}

/** A request URL's path and its query string (with the '?', or ''). */
function splitQuery(url: string): [string, string] {
  const at = url.indexOf('?');
  return at === -1 ? [url, ''] : [url.slice(0, at), url.slice(at)];
}

/**
 * Registers @fastify/swagger, GET /openapi.json and Swagger UI at GET /docs; call before the
 * routes of the document. `components` adds e.g. security schemes that routes name in their
 * `security`.
 */
export function registerOpenApi(
  app: FastifyInstance,
  info: { title: string; version: string },
  extra: { components?: Record<string, unknown> } = {},
): void {
  app.register(swagger, {
    openapi: { openapi: '3.1.0', info, ...(extra.components ? { components: extra.components } : {}) },
    transform: (document: Transform) => {
      const out =
        document.schema && hasZodSchema(document.schema)
          ? jsonSchemaTransform(document)
          : { schema: document.schema, url: document.url };
      const method = [document.route.method].flat()[0] ?? 'GET';
      const schema = (out.schema ?? {}) as { operationId?: string };
      return {
        ...out,
        schema: { ...schema, operationId: schema.operationId ?? operationIdOf(method, document.url) },
      };
    },
  });
  app.register(async (scope) => {
    scope.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
    // Swagger UI's assets ship in the package (no CDN); its routes are hidden from the document.
    // Every link of the page is relative to /docs, so it also works under a path prefix: the
    // assets ('.' makes the plugin's links ./docs/static/...) and the document it reads.
    await scope.register(swaggerUi, {
      routePrefix: DOCS_PATH,
      indexPrefix: '.',
      theme: { title: info.title },
      uiConfig: { urls: [{ url: 'openapi.json', name: info.title }] },
      uiHooks: {
        // The page lives at /docs: from /docs/, 'openapi.json' would mean /docs/openapi.json.
        onRequest: async (request, reply) => {
          const [path, query] = splitQuery(request.url);
          if (request.routeOptions.url === DOCS_PATH && path.endsWith('/')) {
            return reply.redirect(`..${DOCS_PATH}${query}`);
          }
        },
      },
    });
  });
}
