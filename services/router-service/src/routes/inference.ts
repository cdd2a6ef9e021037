// The router's HTTP face: the four inference routes, each handed to the router (router.ts). The
// zod schemas describe the routes in the OpenAPI document only: bodies are not validated (the
// edge does) and go to the backend as the client sent them; replies are the backend's (written
// raw) or catalogue errors, serialized as without a schema.
import {
  chatCompletionRequestSchema,
  chatCompletionResponseSchema,
  completionRequestSchema,
  completionResponseSchema,
  errorResponses,
  generateRequestSchema,
  generateResponseSchema,
  modelListSchema,
  registerIdentityGuard,
} from '@strata/common';
import type { FastifyPluginAsync } from 'fastify';
import { createRouter, type RouterDeps } from '../router.js';
import { keepRawBodies } from './raw-body.js';

// The router's own failures (bad JSON, body size or type, no valid identity in refuse mode, no
// backend, failed or slow backends) and a backend's 4xx, passed through as it came.
const errors = errorResponses(400, 401, 404, 413, 415, 429, 502, 503, 504);
const forwarded =
  'Forwarded to a backend picked by the routing rules, body as sent: the router does not validate ' +
  'it (the edge does). The backend answer, JSON or SSE, comes back as it is.';
const tags = ['inference'];
const produces = ['application/json', 'text/event-stream'];

const postRoutes = [
  {
    path: '/v1/generate',
    summary: 'Generate text; SSE when stream is true',
    body: generateRequestSchema,
    response: generateResponseSchema,
  },
  {
    path: '/v1/completions',
    summary: 'OpenAI-compatible completions',
    body: completionRequestSchema,
    response: completionResponseSchema,
  },
  {
    path: '/v1/chat/completions',
    summary: 'OpenAI-compatible chat completions',
    body: chatCompletionRequestSchema,
    response: chatCompletionResponseSchema,
  },
] as const;

export const inferenceRoutes: FastifyPluginAsync<RouterDeps> = async (scope, deps) => {
  const route = createRouter(deps);
  // Before the body is read: a refused request costs nothing more.
  registerIdentityGuard(scope, {
    keys: deps.identity.keys,
    mode: deps.identity.mode,
    registry: deps.metrics.registry,
    metricName: 'strata_router_identity_total',
  });
  keepRawBodies(scope);
  scope.setValidatorCompiler(() => () => true);
  scope.setSerializerCompiler(() => (data) => JSON.stringify(data));
  for (const { path, summary, body, response } of postRoutes) {
    scope.post(
      path,
      {
        schema: {
          summary,
          description: forwarded,
          tags,
          produces,
          body,
          response: { 200: response, ...errors },
        },
      },
      (request, reply) => route(request, reply, path),
    );
  }
  scope.get(
    '/v1/models',
    {
      schema: {
        summary: 'Models served, as listed by the backend picked for the request',
        description: forwarded,
        tags,
        response: { 200: modelListSchema, ...errors },
      },
    },
    (request, reply) => route(request, reply, '/v1/models'),
  );
};
