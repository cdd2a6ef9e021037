// What every suite shares: the model discovered once in setup(), the mixed request each
// iteration sends, and the options around one named scenario.
import exec from 'k6/execution';
import { config } from './config.js';
import { discoverModel, sendRequest } from './request.js';
import { summaryTrendStats } from './summary.js';
import { thresholds } from './thresholds.js';

export function setup() {
  return { model: discoverModel() };
}

/** One request of the mixed workload (endpoint, streaming, prompt length, session drawn per VU). */
export function mixedRequest(data) {
  sendRequest(data.model, exec.vu.idInTest);
}

/** STRATA_RATE requests/s for STRATA_DURATION (else `duration`), on schedule. */
export function constantRate(duration) {
  return {
    executor: 'constant-arrival-rate',
    rate: config.rate,
    timeUnit: '1s',
    duration: config.duration || duration,
    preAllocatedVUs: config.vus || Math.max(4, Math.ceil(config.rate * 2)),
    maxVUs: config.maxVus,
  };
}

/** From STRATA_RATE through `stages`, with VUs for `peak` requests/s. */
export function rampingRate(peak, stages) {
  return {
    executor: 'ramping-arrival-rate',
    startRate: config.rate,
    timeUnit: '1s',
    preAllocatedVUs: config.vus || Math.ceil(peak * 2),
    maxVUs: config.maxVus,
    stages,
  };
}

/** k6 options for one scenario; `limits` replaces the default thresholds. */
export function scenarioOptions(name, scenario, limits = thresholds()) {
  return { scenarios: { [name]: scenario }, thresholds: limits, summaryTrendStats };
}
