// Remembers which backends recently served which prompt prefixes, so that requests sharing a
// prefix go where its KV blocks are likely still cached. The prompt's leading characters are
// cut into fixed-size blocks (only whole blocks: a partial tail block never repeats exactly)
// and hashed as a chain, h[i] = hash(h[i-1], block i), so equal h[i] means equal first i+1
// blocks. A bounded LRU map holds chain hash -> the few backends that last served it.

export interface PrefixIndexOptions {
  /** Characters per block. */
  blockChars?: number;
  /** Blocks hashed per prompt at most (blockChars * maxBlocks leading characters). */
  maxBlocks?: number;
  /** Chain hashes remembered at most; the least recently recorded go first. */
  capacity?: number;
  /** Backends remembered per chain hash, most recent first. */
  backendsPerHash?: number;
}

/** Hash of one block seeded with the previous chain hash: two 32-bit FNV-1a lanes -> 53 bits. */
function chainHash(prev: number, text: string, start: number, end: number): number {
  let a = (0x811c9dc5 ^ (prev >>> 0)) >>> 0;
  let b = (0x01000193 ^ Math.floor(prev / 0x100000000)) >>> 0;
  for (let i = start; i < end; i++) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
  }
  return (a >>> 0) * 0x200000 + ((b >>> 0) >>> 11);
}

export class PrefixIndex {
  readonly blockChars: number;
  readonly maxBlocks: number;
  readonly capacity: number;
  readonly backendsPerHash: number;
  // Map keeps insertion order: the first key is the least recently recorded.
  private readonly entries = new Map<number, string[]>();

  constructor(options: PrefixIndexOptions = {}) {
    this.blockChars = options.blockChars ?? 256;
    this.maxBlocks = options.maxBlocks ?? 32;
    this.capacity = options.capacity ?? 65_536;
    this.backendsPerHash = options.backendsPerHash ?? 4;
  }

  get size(): number {
    return this.entries.size;
  }

  /** Chain hashes of the prompt's leading whole blocks. */
  hashes(prompt: string): number[] {
    const blocks = Math.min(this.maxBlocks, Math.floor(prompt.length / this.blockChars));
    const out = new Array<number>(blocks);
    let h = 0;
    for (let i = 0; i < blocks; i++) {
      h = chainHash(h, prompt, i * this.blockChars, (i + 1) * this.blockChars);
      out[i] = h;
    }
    return out;
  }

  /** Per backend, how many leading blocks of this chain it served recently. Reads only. */
  matchedBlocks(hashes: readonly number[]): Map<string, number> {
    const matched = new Map<string, number>();
    // A chain hash is recorded only together with all shallower ones, and those are refreshed
    // after it (see record), so they are evicted after it: the first absent hash ends the chain.
    for (let i = 0; i < hashes.length; i++) {
      const backends = this.entries.get(hashes[i] as number);
      if (backends === undefined) break;
      for (const name of backends) matched.set(name, i + 1);
    }
    return matched;
  }

  /** The chain was sent to `backend`. */
  record(hashes: readonly number[], backend: string): void {
    // Deepest block first, so the leading blocks (shared by the most prompts) are the most
    // recent and the last to be evicted.
    for (let i = hashes.length - 1; i >= 0; i--) {
      const h = hashes[i] as number;
      const previous = this.entries.get(h);
      const backends =
        previous === undefined ? [backend] : [backend, ...previous.filter((n) => n !== backend)];
      if (backends.length > this.backendsPerHash) backends.length = this.backendsPerHash;
      this.entries.delete(h);
      this.entries.set(h, backends);
    }
    while (this.entries.size > this.capacity) {
      const oldest = this.entries.keys().next();
      if (oldest.done) break;
      this.entries.delete(oldest.value);
    }
  }

  /** A backend left the pool: forget it everywhere. O(size); membership changes are rare. */
  forget(backend: string): void {
    for (const [h, backends] of this.entries) {
      if (!backends.includes(backend)) continue;
      const rest = backends.filter((n) => n !== backend);
      if (rest.length === 0) this.entries.delete(h);
      else this.entries.set(h, rest);
    }
  }
}
