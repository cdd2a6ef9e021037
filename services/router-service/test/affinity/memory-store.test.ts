import { describe, expect, it } from 'vitest';
import { MemorySessionStore } from '../../src/affinity/memory-store.js';

function clock(start = 1_000): { now: () => number; advance: (ms: number) => void } {
  let t = start;
  return {
    now: () => t,
    advance: (ms) => {
      t += ms;
    },
  };
}

describe('MemorySessionStore', () => {
  it('expires entries after their TTL', async () => {
    const c = clock();
    const store = new MemorySessionStore({ now: c.now });
    await store.set('s1', 'b1', 1_000);
    c.advance(999);
    expect(await store.get('s1')).toBe('b1');
    c.advance(1);
    expect(await store.get('s1')).toBeUndefined();
    expect(store.size).toBe(0);
  });

  it('getAndTouch refreshes the TTL; get does not', async () => {
    const c = clock();
    const store = new MemorySessionStore({ now: c.now });
    await store.set('s1', 'b1', 1_000);
    c.advance(800);
    expect(await store.get('s1')).toBe('b1');
    expect(await store.getAndTouch('s1', 1_000)).toBe('b1');
    c.advance(800); // 1,600 ms after set, 800 after the touch
    expect(await store.get('s1')).toBe('b1');
    c.advance(200);
    expect(await store.get('s1')).toBeUndefined();
    expect(await store.getAndTouch('missing', 1_000)).toBeUndefined();
  });

  it('evicts the least recently used session beyond maxEntries', async () => {
    const store = new MemorySessionStore({ maxEntries: 3 });
    await store.set('a', 'b1', 60_000);
    await store.set('b', 'b1', 60_000);
    await store.set('c', 'b1', 60_000);
    expect(await store.getAndTouch('a', 60_000)).toBe('b1'); // a is now the most recent
    await store.set('d', 'b2', 60_000);
    expect(store.size).toBe(3);
    expect(await store.get('b')).toBeUndefined();
    expect(await store.get('a')).toBe('b1');
    expect(await store.get('c')).toBe('b1');
    expect(await store.get('d')).toBe('b2');
  });

  it('reassigns on set, and deleteIf only deletes the matching backend', async () => {
    const store = new MemorySessionStore();
    await store.set('s', 'b1', 60_000);
    await store.set('s', 'b2', 60_000);
    await store.deleteIf('s', 'b1');
    expect(await store.get('s')).toBe('b2');
    await store.deleteIf('s', 'b2');
    expect(await store.get('s')).toBeUndefined();
    await store.set('s', 'b3', 60_000);
    await store.delete('s');
    expect(await store.get('s')).toBeUndefined();
  });

  it('rejects a non-positive bound', () => {
    expect(() => new MemorySessionStore({ maxEntries: 0 })).toThrow(RangeError);
  });
});
