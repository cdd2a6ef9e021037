import { describe, expect, it } from 'vitest';
import { PrefixIndex } from '../../../src/routing/scorers/prefix-index.js';

const block = (c: string) => c.repeat(4);

describe('prefix index', () => {
  const index = () => new PrefixIndex({ blockChars: 4, maxBlocks: 3, capacity: 100 });

  it('hashes whole leading blocks as a chain, up to maxBlocks', () => {
    const idx = index();
    expect(idx.hashes('abc')).toEqual([]);
    const h = idx.hashes(`${block('a')}${block('b')}${block('c')}${block('d')}tail`);
    expect(h).toHaveLength(3);
    expect(new Set(h).size).toBe(3);
    // Same first block, same first hash; a different first block changes every later hash.
    expect(idx.hashes(`${block('a')}xxxx`)[0]).toBe(h[0]);
    const other = idx.hashes(`${block('z')}${block('b')}${block('c')}`);
    expect(other.some((x, i) => x === h[i])).toBe(false);
    expect(idx.hashes(`${block('a')}${block('b')}${block('c')}`)).toEqual(h);
    expect(h.every((x) => Number.isSafeInteger(x) && x >= 0)).toBe(true);
  });

  it('reports the longest recorded chain per backend', () => {
    const idx = index();
    const long = idx.hashes(`${block('a')}${block('b')}${block('c')}`);
    const short = idx.hashes(`${block('a')}${block('q')}`);
    idx.record(long, 'x');
    idx.record(short, 'y');
    expect([...idx.matchedBlocks(long)]).toEqual([
      ['y', 1],
      ['x', 3],
    ]);
    expect([...idx.matchedBlocks(short)]).toEqual([
      ['y', 2],
      ['x', 1],
    ]);
    expect(idx.size).toBe(4);
  });

  it('keeps at most backendsPerHash backends per hash, most recent first', () => {
    const idx = new PrefixIndex({ blockChars: 4, backendsPerHash: 2 });
    const h = idx.hashes(block('a'));
    idx.record(h, 'x');
    idx.record(h, 'y');
    idx.record(h, 'z');
    idx.record(h, 'y');
    expect([...idx.matchedBlocks(h).keys()]).toEqual(['y', 'z']);
  });

  it('evicts the least recently recorded hashes, deepest blocks first', () => {
    const idx = new PrefixIndex({ blockChars: 4, maxBlocks: 3, capacity: 4 });
    const first = idx.hashes(`${block('a')}${block('b')}${block('c')}`);
    const second = idx.hashes(`${block('d')}${block('e')}`);
    idx.record(first, 'x');
    idx.record(second, 'y');
    expect(idx.size).toBe(4);
    // The third block of `first` was evicted; its first two remain.
    expect([...idx.matchedBlocks(first)]).toEqual([['x', 2]]);
    expect([...idx.matchedBlocks(second)]).toEqual([['y', 2]]);
  });

  it('ends a match at the first unknown block', () => {
    const idx = index();
    const h = idx.hashes(`${block('a')}${block('b')}${block('c')}`);
    idx.record(h, 'x');
    const diverged = idx.hashes(`${block('a')}${block('z')}${block('c')}`);
    expect([...idx.matchedBlocks(diverged)]).toEqual([['x', 1]]);
  });

  it('forgets a backend that left', () => {
    const idx = index();
    const h = idx.hashes(`${block('a')}${block('b')}`);
    idx.record(h, 'x');
    idx.record(h.slice(0, 1), 'y');
    idx.forget('x');
    expect([...idx.matchedBlocks(h)]).toEqual([['y', 1]]);
    expect(idx.size).toBe(1);
  });
});
