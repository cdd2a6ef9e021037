import {
  type BootContext,
  chatCompletionRequestSchema,
  chatCompletionResponseSchema,
  completionRequestSchema,
  completionResponseSchema,
  createServiceApp,
  errorResponseSchema,
  generateRequestSchema,
  generateResponseSchema,
  modelListSchema,
  registerOpenApi,
} from '@strata/common';
import type { FastifyInstance } from 'fastify';
import type { Config } from './config.js';
import { createRouter, type RouterDeps } from './router.js';

// The router's own failures (bad JSON, body size or type, no backend, failed or slow backends)
// and a backend's 4xx, passed through as it came.
const errors = {
  400: errorResponseSchema,
  404: errorResponseSchema,
  413: errorResponseSchema,
  415: errorResponseSchema,
  429: errorResponseSchema,
  502: errorResponseSchema,
  503: errorResponseSchema,
  504: errorResponseSchema,
};
const forwarded =
  'Forwarded to a backend picked by the routing rules, body as sent: the router does not validate ' +
  'it (the edge does). The backend answer, JSON or SSE, comes back as it is.';
const tags = ['inference'];
const produces = ['application/json', 'text/event-stream'];

const inferenceRoutes = [
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

// Layer 2: decides which backend serves each request and logs why. Bodies are forwarded as
// they came (the edge validated them); the router only reads what its rules look at.
export function buildApp(
  ctx: Omit<BootContext<Config>, 'telemetry'>,
  deps?: Omit<RouterDeps, 'metrics'>,
): FastifyInstance {
  const app = createServiceApp({
    name: 'router-service',
    logger: ctx.logger,
    metrics: ctx.metrics,
    readiness: ctx.readiness,
    bodyLimit: 8 * 1024 * 1024,
    traceRequests: 'continue',
  });
  // Before the routes: @fastify/swagger collects them as they are registered.
  registerOpenApi(app, { title: 'Strata router', version: '0.1.0' });
  if (!deps) return app;
  const route = createRouter({ ...deps, metrics: ctx.metrics });
  app.register(async (scope) => {
    // The zod schemas describe the routes in the document only: bodies are not validated, and
    // replies are the backend's (written raw) or catalogue errors, serialized as without a schema.
    scope.setValidatorCompiler(() => () => true);
    scope.setSerializerCompiler(() => (data) => JSON.stringify(data));
    for (const { path, summary, body, response } of inferenceRoutes) {
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
  });
  return app;
}
