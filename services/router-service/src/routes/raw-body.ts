// Keeps the bytes of each JSON (or plain text) body as the client sent them, for forwarding,
// next to the parsed value the rules read. Fastify's own JSON parser still parses, so bad JSON,
// an empty body and prototype poisoning are refused as before.
import type { FastifyInstance } from 'fastify';

declare module 'fastify' {
  interface FastifyRequest {
    /** The body as received; undefined when the request had none. */
    rawBody: Buffer | undefined;
  }
}

/** Replaces the scope's JSON and text parsers with ones that also keep request.rawBody. */
export function keepRawBodies(scope: FastifyInstance): void {
  scope.decorateRequest('rawBody', undefined);
  // Fastify fills both settings in (default 'error'); its type leaves them optional.
  const { onProtoPoisoning = 'error', onConstructorPoisoning = 'error' } = scope.initialConfig;
  const parseJson = scope.getDefaultJsonParser(onProtoPoisoning, onConstructorPoisoning);
  scope.removeContentTypeParser(['application/json', 'text/plain']);
  scope.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    request.rawBody = body as Buffer;
    parseJson(request, (body as Buffer).toString(), done);
  });
  scope.addContentTypeParser('text/plain', { parseAs: 'buffer' }, (request, body, done) => {
    request.rawBody = body as Buffer;
    done(null, (body as Buffer).toString());
  });
}
