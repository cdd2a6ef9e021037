// Steady: a constant arrival rate (STRATA_RATE requests/s for STRATA_DURATION, default 4/s for
// 1m) of the mixed workload; new requests arrive on schedule however slowly earlier ones finish.
import { constantRate, mixedRequest, scenarioOptions } from './lib/scenario.js';
import { summaryHandler } from './lib/summary.js';

export { setup } from './lib/scenario.js';
export const options = scenarioOptions('steady', constantRate('1m'));
export default mixedRequest;
export const handleSummary = summaryHandler('steady');
