// The embedded default: quotas in this process's memory, right for one replica (local runs).
import {
  type Admission,
  type BucketState,
  type Limits,
  type QuotaStore,
  refill,
  state,
  untilOne,
} from './bucket.js';

interface Level {
  value: number;
  at: number;
}

export class MemoryQuotaStore implements QuotaStore {
  private readonly levels = new Map<string, Level>();

  constructor(private readonly now: () => number = Date.now) {}

  private level(key: string, limit: number, now: number): number {
    const l = this.levels.get(key);
    return refill(l?.value, l?.at ?? now, now, limit);
  }

  private save(key: string, value: number, limit: number, now: number): void {
    if (value >= limit)
      this.levels.delete(key); // full is the same as never seen
    else this.levels.set(key, { value, at: now });
  }

  async admit(tenant: string, limits: Limits): Promise<Admission> {
    const now = this.now();
    const { requestsPerMinute: rpm, tokensPerMinute: tpm } = limits;
    const req = rpm > 0 ? this.level(`${tenant}:req`, rpm, now) : undefined;
    const tok = tpm > 0 ? this.level(`${tenant}:tok`, tpm, now) : undefined;
    let refusedBy: Admission['refusedBy'];
    let retryAfterMs = 0;
    if (req !== undefined && req < 1) {
      refusedBy = 'requests';
      retryAfterMs = untilOne(req, rpm);
    } else if (tok !== undefined && tok < 1) {
      refusedBy = 'tokens';
      retryAfterMs = untilOne(tok, tpm);
    }
    const reqAfter = req !== undefined && refusedBy === undefined ? req - 1 : req;
    if (reqAfter !== undefined) this.save(`${tenant}:req`, reqAfter, rpm, now);
    return {
      allowed: refusedBy === undefined,
      ...(refusedBy ? { refusedBy } : {}),
      retryAfterMs,
      requests: reqAfter === undefined ? undefined : state(reqAfter, rpm),
      tokens: tok === undefined ? undefined : state(tok, tpm),
    };
  }

  async charge(tenant: string, tokens: number, tokensPerMinute: number): Promise<BucketState | undefined> {
    if (tokensPerMinute <= 0) return undefined;
    const now = this.now();
    const value = this.level(`${tenant}:tok`, tokensPerMinute, now) - tokens;
    this.save(`${tenant}:tok`, value, tokensPerMinute, now);
    return state(value, tokensPerMinute);
  }

  async close(): Promise<void> {}
}
