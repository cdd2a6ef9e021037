// Spike: STRATA_RATE requests/s, then a sudden jump to STRATA_PEAK_RATE (default 10x) for a
// third of STRATA_DURATION (default 90s), then back. 429s (with Retry-After) are expected while
// it lasts; what must hold is that every accepted request finishes and errors stay rare.
import { config, seconds } from './lib/config.js';
import { mixedRequest, rampingRate, scenarioOptions } from './lib/scenario.js';
import { summaryHandler } from './lib/summary.js';
import { thresholds } from './lib/thresholds.js';

const third = Math.max(1, Math.round(seconds(config.duration || '90s') / 3));
const peak = config.peakRate || config.rate * 10;

export { setup } from './lib/scenario.js';
export const options = scenarioOptions(
  'spike',
  rampingRate(peak, [
    { target: config.rate, duration: `${third}s` },
    { target: peak, duration: '2s' },
    { target: peak, duration: `${third}s` },
    { target: config.rate, duration: '2s' },
    { target: config.rate, duration: `${third}s` },
  ]),
  // Shedding load is the point of the spike: accept up to 90% 429s, still no errors.
  { ...thresholds({ rateLimited: Number(__ENV.STRATA_MAX_RATE_LIMITED || 0.9) }), strata_ttft_ms: [] },
);
export default mixedRequest;
export const handleSummary = summaryHandler('spike');
