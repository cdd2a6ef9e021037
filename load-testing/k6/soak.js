// Soak: a moderate constant arrival rate for a long time (STRATA_DURATION, default 30m) to find
// leaks: KV blocks, memory, connections. Watch kv_blocks_free on each backend's /load and the
// process memory in Prometheus while it runs.
import { constantRate, mixedRequest, scenarioOptions } from './lib/scenario.js';
import { summaryHandler } from './lib/summary.js';

export { setup } from './lib/scenario.js';
export const options = scenarioOptions('soak', constantRate('30m'));
export default mixedRequest;
export const handleSummary = summaryHandler('soak');
