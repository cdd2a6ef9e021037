// Ramp: the arrival rate climbs from STRATA_RATE to STRATA_PEAK_RATE (default 4x) over
// STRATA_DURATION (default 2m), holds the peak for a quarter of that, then comes back down:
// where TTFT starts to climb is the platform's knee.
import { config, seconds } from './lib/config.js';
import { mixedRequest, rampingRate, scenarioOptions } from './lib/scenario.js';
import { summaryHandler } from './lib/summary.js';

const total = seconds(config.duration || '2m');
const peak = config.peakRate || config.rate * 4;

export { setup } from './lib/scenario.js';
export const options = scenarioOptions(
  'ramp',
  rampingRate(peak, [
    { target: peak, duration: `${Math.round(total * 0.6)}s` },
    { target: peak, duration: `${Math.round(total * 0.25)}s` },
    { target: config.rate, duration: `${Math.round(total * 0.15)}s` },
  ]),
);
export default mixedRequest;
export const handleSummary = summaryHandler('ramp');
