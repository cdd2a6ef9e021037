import { describe, expect, it } from 'vitest';
import { ERROR_CATALOGUE, isErrorCode, StrataError } from '../src/errors.js';

describe('error catalogue', () => {
  it('gives every code a STRATA_ prefix, an HTTP error status and a known type', () => {
    for (const [code, entry] of Object.entries(ERROR_CATALOGUE)) {
      expect(code).toMatch(/^STRATA_[A-Z_]+$/);
      expect(entry.status).toBeGreaterThanOrEqual(400);
      expect(entry.status).toBeLessThan(600);
      expect(['invalid_request', 'auth', 'rate_limit', 'overloaded', 'internal']).toContain(entry.type);
      expect(entry.message.length).toBeGreaterThan(0);
    }
  });

  it('builds the wire body (docs/architecture.md, Wire contracts) from a code and a specific message', () => {
    const err = new StrataError(
      'STRATA_PROMPT_TOO_LONG',
      'prompt has 600 tokens; the model takes at most 512',
    );
    expect(err.statusCode).toBe(400);
    expect(err.toBody()).toEqual({
      error: {
        code: 'STRATA_PROMPT_TOO_LONG',
        message: 'prompt has 600 tokens; the model takes at most 512',
        type: 'invalid_request',
      },
    });
  });

  it('uses the catalogue message when none is given and carries details and cause', () => {
    const cause = new Error('socket hang up');
    const err = new StrataError('STRATA_UPSTREAM_ERROR', undefined, { details: { backend: 'b1' }, cause });
    expect(err.message).toBe('The upstream service failed.');
    expect(err.statusCode).toBe(502);
    expect(err.cause).toBe(cause);
    expect(err.toBody().error.details).toEqual({ backend: 'b1' });
  });

  it('recognises catalogue codes only', () => {
    expect(isErrorCode('STRATA_QUEUE_FULL')).toBe(true);
    expect(isErrorCode('STRATA_NOPE')).toBe(false);
    expect(isErrorCode('toString')).toBe(false);
    expect(isErrorCode(42)).toBe(false);
  });
});
