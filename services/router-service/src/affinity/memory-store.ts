// In-memory SessionStore: TTL per entry, at most maxEntries sessions with least-recently-used
// eviction (a Map iterates in insertion order; a use re-inserts the entry at the end).
import type { SessionStore } from './store.js';

export interface MemorySessionStoreOptions {
  /** Most sessions kept; the least recently used one is evicted beyond that. Default 100,000. */
  maxEntries?: number;
  /** Clock in epoch ms; tests pass a fake one. */
  now?: () => number;
}

interface Entry {
  backend: string;
  expiresAt: number;
}

export class MemorySessionStore implements SessionStore {
  private readonly entries = new Map<string, Entry>();
  private readonly maxEntries: number;
  private readonly now: () => number;

  constructor(options: MemorySessionStoreOptions = {}) {
    this.maxEntries = options.maxEntries ?? 100_000;
    if (!Number.isInteger(this.maxEntries) || this.maxEntries < 1) {
      throw new RangeError(`maxEntries must be a positive integer, got ${this.maxEntries}`);
    }
    this.now = options.now ?? Date.now;
  }

  get size(): number {
    return this.entries.size;
  }

  async get(session: string): Promise<string | undefined> {
    return this.live(session)?.backend;
  }

  async getAndTouch(session: string, ttlMs: number): Promise<string | undefined> {
    const entry = this.live(session);
    if (!entry) return undefined;
    entry.expiresAt = this.now() + ttlMs;
    this.entries.delete(session);
    this.entries.set(session, entry);
    return entry.backend;
  }

  async set(session: string, backend: string, ttlMs: number): Promise<void> {
    this.entries.delete(session);
    this.entries.set(session, { backend, expiresAt: this.now() + ttlMs });
    this.evict();
  }

  async deleteIf(session: string, backend: string): Promise<void> {
    if (this.entries.get(session)?.backend === backend) this.entries.delete(session);
  }

  async delete(session: string): Promise<void> {
    this.entries.delete(session);
  }

  async close(): Promise<void> {
    this.entries.clear();
  }

  private live(session: string): Entry | undefined {
    const entry = this.entries.get(session);
    if (!entry) return undefined;
    if (entry.expiresAt <= this.now()) {
      this.entries.delete(session);
      return undefined;
    }
    return entry;
  }

  private evict(): void {
    // Expired entries are dropped lazily on read; beyond the bound the oldest-used go first.
    while (this.entries.size > this.maxEntries) {
      const oldest = this.entries.keys().next();
      if (oldest.done) return;
      this.entries.delete(oldest.value);
    }
  }
}
