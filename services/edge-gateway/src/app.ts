// Layer 1: the front door behind Envoy. Validates every request against the shared schemas,
// authenticates it to a tenant, takes its quota, and forwards it to the router; everything bad
// is refused here with a catalogue error and never reaches the router. Knows nothing of models,
// backends or GPUs.
import {
  type BootContext,
  createServiceApp,
  type IdentityKey,
  registerOpenApi,
  toStrataError,
} from '@strata/common';
import type { FastifyError, FastifyInstance } from 'fastify';
import { serializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import type { Dispatcher } from 'undici';
import type { TenantKey } from './auth/tenants.js';
import type { Config } from './config.js';
import { createEdgeMetrics, rejectionReason } from './metrics.js';
import type { Quotas } from './quota/quotas.js';
import { publicRoutes } from './routes/public.js';

export interface EdgeParts {
  router: Dispatcher;
  keys: () => readonly TenantKey[] | undefined;
  quotas: Quotas;
  /** The key that signs forwarded identities (the first of STRATA_IDENTITY_KEYS). */
  identityKey: IdentityKey | undefined;
}

// Failures the edge did not decide: counted as upstream errors by the proxy, not as rejections.
const UPSTREAM_CODES = new Set(['STRATA_UPSTREAM_ERROR', 'STRATA_UPSTREAM_TIMEOUT']);

export function buildApp(ctx: Omit<BootContext<Config>, 'telemetry'>, parts: EdgeParts): FastifyInstance {
  const app = createServiceApp({
    name: 'edge-gateway',
    logger: ctx.logger,
    metrics: ctx.metrics,
    readiness: ctx.readiness,
    bodyLimit: ctx.config.maxBodyBytes,
    traceRequests: 'originate',
  });
  const metrics = createEdgeMetrics(ctx.metrics.registry);

  app.addHook('onError', async (request, _reply, err: FastifyError) => {
    const { code } = toStrataError(err);
    if (UPSTREAM_CODES.has(code)) return;
    metrics.rejections.inc({ code, reason: rejectionReason(code) });
    metrics.requests.inc({ endpoint: request.routeOptions.url ?? 'unmatched', outcome: 'rejected' });
  });
  app.addHook('onResponse', (request, reply, done) => {
    // Unknown routes and known ones asked with another method are answered by the not-found
    // handler, which raises no error.
    if (request.routeOptions.url === undefined && (reply.statusCode === 404 || reply.statusCode === 405)) {
      const code = reply.statusCode === 404 ? 'STRATA_NOT_FOUND' : 'STRATA_METHOD_NOT_ALLOWED';
      metrics.rejections.inc({ code, reason: rejectionReason(code) });
      metrics.requests.inc({ endpoint: 'unmatched', outcome: 'rejected' });
    }
    done();
  });

  registerOpenApi(
    app,
    { title: 'Strata edge gateway', version: '0.1.0' },
    {
      components: {
        securitySchemes: { bearerAuth: { type: 'http', scheme: 'bearer', description: 'A tenant API key' } },
      },
    },
  );
  app.register(async (scope) => {
    // JSON only: Fastify's default text/plain parser would let a string body reach validation.
    scope.removeContentTypeParser('text/plain');
    scope.setValidatorCompiler(validatorCompiler);
    scope.setSerializerCompiler(serializerCompiler);
    await scope.register(publicRoutes, { ...parts, metrics });
  });
  return app;
}
