// The session → backend store behind session affinity (docs/architecture.md, Routing). Two
// implementations share this interface: MemorySessionStore (embedded default for local runs, one process) and
// RedisSessionStore (shared by every router replica). Stores may throw; AffinityService turns
// errors into "no affinity" so the request path never sees them.

export interface SessionStore {
  /** The backend remembered for this session, without refreshing its TTL. */
  get(session: string): Promise<string | undefined>;
  /** The backend remembered for this session, refreshing its TTL to ttlMs in the same step (refresh on use). */
  getAndTouch(session: string, ttlMs: number): Promise<string | undefined>;
  /** Remember (or reassign) the session's backend for ttlMs. */
  set(session: string, backend: string, ttlMs: number): Promise<void>;
  /** Forget the session only while it still points to `backend` (another replica may have reassigned it). */
  deleteIf(session: string, backend: string): Promise<void>;
  /** Forget the session. */
  delete(session: string): Promise<void>;
  close(): Promise<void>;
}
