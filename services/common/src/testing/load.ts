// The /load report of an idle, ready backend with 1,000 free KV blocks, for stand-in backends.
import type { LoadReport } from '../protocol.js';

export function idleLoadReport(model: string): Omit<LoadReport, 'timestamp_ms'> {
  return {
    model,
    ready: true,
    running: 0,
    waiting: 0,
    live_requests: 0,
    kv_usage: 0,
    kv_blocks_free: 1000,
    kv_blocks_total: 1000,
  };
}
