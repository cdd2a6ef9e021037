// Readiness as a set of named conditions (e.g. model_loaded, warmup_done) plus draining.
// A service is ready when every condition holds and it is not draining.

export interface ReadinessReport {
  ready: boolean;
  draining: boolean;
  checks: Record<string, { ok: boolean; detail?: string }>;
}

export class Readiness {
  private readonly checks = new Map<string, { ok: boolean; detail?: string }>();
  private drainingSince: number | undefined;
  private readonly drainListeners: (() => void)[] = [];

  /** Declares or updates a condition; detail says why it does not hold (or what holds). */
  set(name: string, ok: boolean, detail?: string): void {
    this.checks.set(name, detail === undefined ? { ok } : { ok, detail });
  }

  startDraining(): void {
    if (this.drainingSince !== undefined) return;
    this.drainingSince = Date.now();
    for (const listener of this.drainListeners.splice(0)) listener();
  }

  /** Calls `listener` once, when draining starts (at once if it has). */
  onDraining(listener: () => void): void {
    if (this.draining) listener();
    else this.drainListeners.push(listener);
  }

  get draining(): boolean {
    return this.drainingSince !== undefined;
  }

  get ready(): boolean {
    if (this.draining) return false;
    for (const check of this.checks.values()) if (!check.ok) return false;
    return true;
  }

  report(): ReadinessReport {
    return { ready: this.ready, draining: this.draining, checks: Object.fromEntries(this.checks) };
  }
}
