// The OpenAPI document of the service, generated from the route schemas by @fastify/swagger and
// served at GET /openapi.json. Inference routes carry zod schemas (turned into JSON Schema by
// fastify-type-provider-zod); the service base's routes carry plain JSON Schema, used as is.
import swagger from '@fastify/swagger';
import type { FastifyInstance } from 'fastify';
import { jsonSchemaTransform } from 'fastify-type-provider-zod';

type Transform = NonNullable<Parameters<typeof jsonSchemaTransform>[0]>;

const isZod = (value: unknown): boolean => typeof value === 'object' && value !== null && '_zod' in value;

/** True when any part of a route schema (body, querystring, params, headers, a response) is zod. */
function hasZodSchema(schema: Transform['schema']): boolean {
  const { response, ...parts } = schema;
  const responses = typeof response === 'object' && response !== null ? Object.values(response) : [];
  return [...Object.values(parts), ...responses].some(isZod);
}

/**
 * Registers @fastify/swagger and GET /openapi.json; call before the routes of the document.
 * `components` adds e.g. security schemes that routes name in their `security`.
 */
export function registerOpenApi(
  app: FastifyInstance,
  info: { title: string; version: string },
  extra: { components?: Record<string, unknown> } = {},
): void {
  app.register(swagger, {
    openapi: { openapi: '3.1.0', info, ...(extra.components ? { components: extra.components } : {}) },
    transform: (document: Transform) =>
      document.schema && hasZodSchema(document.schema)
        ? jsonSchemaTransform(document)
        : { schema: document.schema, url: document.url },
  });
  app.register(async (scope) => {
    scope.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  });
}
