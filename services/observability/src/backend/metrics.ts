// The sidecar's view of its backend: whether the last poll answered, how old the kept values
// are, and the engine state from /load (gauges keep the last good values through failures).
import { Gauge, type Registry } from '@strata/common';
import type { BackendCollector } from './collector.js';

export function registerBackendMetrics(registry: Registry, backend: BackendCollector): void {
  new Gauge({
    name: 'strata_sidecar_backend_up',
    help: '1 while the last poll of the backend /load answered, else 0.',
    registers: [registry],
    collect() {
      this.set(backend.up ? 1 : 0);
    },
  });
  new Gauge({
    name: 'strata_sidecar_backend_stats_age_seconds',
    help: 'Seconds since the backend values were last refreshed (-1 before the first poll answered).',
    registers: [registry],
    collect() {
      this.set(backend.last ? (Date.now() - backend.last.takenAtMs) / 1000 : -1);
    },
  });
  const fromLoad = (name: string, help: string, read: (l: NonNullable<BackendCollector['last']>) => number) =>
    new Gauge<'model_name'>({
      name,
      help,
      labelNames: ['model_name'],
      registers: [registry],
      collect() {
        this.reset();
        if (backend.last) this.set({ model_name: backend.last.load.model }, read(backend.last));
      },
    });
  fromLoad('strata_sidecar_backend_ready', 'The backend /load ready flag (1 ready, 0 not).', (s) =>
    s.load.ready ? 1 : 0,
  );
  fromLoad(
    'strata_sidecar_backend_live_requests',
    'Requests admitted by the backend and not finished (running + waiting + not yet submitted).',
    (s) => s.load.live_requests,
  );
  fromLoad(
    'strata_sidecar_backend_kv_blocks_free',
    'KV blocks a new request can take.',
    (s) => s.load.kv_blocks_free,
  );
  fromLoad('strata_sidecar_backend_kv_blocks_total', 'KV blocks in the pool.', (s) => s.load.kv_blocks_total);
}
