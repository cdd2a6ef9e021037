import { describe, expect, it } from 'vitest';
import {
  childTraceparent,
  formatTraceparent,
  isValidRequestId,
  parseTraceparent,
  propagationHeaders,
  requestIdFrom,
  stripInternalHeaders,
} from '../src/headers.js';

const TP = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

describe('request ids', () => {
  it('keeps a plain client id and replaces a missing or unsafe one with a UUID', () => {
    expect(requestIdFrom({ 'x-request-id': 'abc-123' })).toBe('abc-123');
    expect(requestIdFrom({ 'x-request-id': ['first', 'second'] })).toBe('first');
    const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
    expect(requestIdFrom({})).toMatch(uuid);
    expect(requestIdFrom({ 'x-request-id': 'a b\n' })).toMatch(uuid);
    expect(requestIdFrom({ 'x-request-id': 'x'.repeat(129) })).toMatch(uuid);
    expect(isValidRequestId('x'.repeat(128))).toBe(true);
  });
});

describe('W3C traceparent', () => {
  it('parses and formats a valid header', () => {
    const tp = parseTraceparent(TP);
    expect(tp).toEqual({
      version: '00',
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      parentId: '00f067aa0ba902b7',
      flags: '01',
    });
    expect(tp && formatTraceparent(tp)).toBe(TP);
  });

  it('rejects malformed, all-zero and forbidden-version headers', () => {
    expect(parseTraceparent('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7')).toBeUndefined();
    expect(parseTraceparent('00-00000000000000000000000000000000-00f067aa0ba902b7-01')).toBeUndefined();
    expect(parseTraceparent('00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01')).toBeUndefined();
    expect(parseTraceparent('ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01')).toBeUndefined();
    expect(parseTraceparent('00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01')).toBeUndefined();
    expect(parseTraceparent(undefined)).toBeUndefined();
  });

  it('makes a child in the same trace, or starts a sampled trace', () => {
    const child = childTraceparent(TP);
    expect(child.traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
    expect(child.parentId).toMatch(/^[0-9a-f]{16}$/);
    expect(child.parentId).not.toBe('00f067aa0ba902b7');
    const fresh = childTraceparent('garbage');
    expect(fresh.traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(fresh.flags).toBe('01');
    expect(parseTraceparent(formatTraceparent(fresh))).toEqual(fresh);
  });
});

describe('hop-to-hop headers', () => {
  it('strips the headers only the platform may set', () => {
    const out = stripInternalHeaders({
      'x-strata-tenant': 'evil',
      'x-strata-identity': 'v1.forged',
      'x-strata-backend': 'b',
      'x-strata-route': 'r',
      'content-type': 'application/json',
    });
    expect(out).toEqual({ 'content-type': 'application/json' });
  });

  it('forwards exactly the propagated headers', () => {
    expect(
      propagationHeaders({
        'x-request-id': 'r1',
        traceparent: TP,
        'x-strata-tenant': 't1',
        'x-session-id': 's1',
        'x-strata-priority': '2',
        'x-strata-identity': 'v1.k1.e30.sig',
        authorization: 'Bearer secret',
        host: 'edge',
      }),
    ).toEqual({
      'x-request-id': 'r1',
      traceparent: TP,
      'x-strata-tenant': 't1',
      'x-session-id': 's1',
      'x-strata-priority': '2',
      'x-strata-identity': 'v1.k1.e30.sig',
    });
  });
});
