import { describe, expect, it } from 'vitest';
import { DEFAULT_LOAD_MAX_AGE_MS, freshLoad } from '../../src/routing/backend-state.js';
import { filterBackends } from '../../src/routing/filters.js';
import { backend, NOW } from './helpers.js';

describe('filters', () => {
  it('keeps ready, healthy backends and says why the others are out', () => {
    const result = filterBackends(
      [
        backend('a', { waiting: 1 }),
        backend('b', undefined, { ready: false }),
        backend('c', undefined, { healthy: false }),
        backend('d', undefined, { ready: false, healthy: false }),
        backend('e'),
      ],
      NOW,
      DEFAULT_LOAD_MAX_AGE_MS,
    );
    expect(result.eligible.map((e) => e.backend.name)).toEqual(['a', 'e']);
    expect(result.excluded).toEqual([
      { name: 'b', why: 'not ready' },
      { name: 'c', why: 'ejected' },
      { name: 'd', why: 'not ready' },
    ]);
  });

  it('keeps a backend with stale or missing load eligible, with load unknown', () => {
    const stale = backend('stale', { waiting: 3, at: NOW - 251 });
    const edge = backend('edge', { waiting: 3, at: NOW - 250 });
    const result = filterBackends([stale, edge, backend('none')], NOW, DEFAULT_LOAD_MAX_AGE_MS);
    expect(result.eligible.map((e) => [e.backend.name, e.load?.waiting])).toEqual([
      ['stale', undefined],
      ['edge', 3],
      ['none', undefined],
    ]);
    expect(filterBackends([stale], NOW, 1000).eligible[0]?.load?.waiting).toBe(3);
    expect(freshLoad(stale.load, NOW, 300)?.waiting).toBe(3);
  });
});
