// Smoke: one virtual user walks every endpoint, streaming and not, a few times over; every
// request must succeed. Quick proof that a deployment serves the whole public API.
//   k6 run -e STRATA_TARGET_URL=https://llm.example.com -e STRATA_API_KEY=... k6/smoke.js
import exec from 'k6/execution';
import { sendRequest } from './lib/request.js';
import { scenarioOptions } from './lib/scenario.js';
import { summaryHandler } from './lib/summary.js';
import { thresholds } from './lib/thresholds.js';

const COMBINATIONS = ['generate', 'completions', 'chat'].flatMap((endpoint) => [
  { endpoint, stream: true },
  { endpoint, stream: false },
]);

export { setup } from './lib/scenario.js';
export const options = scenarioOptions(
  'smoke',
  { executor: 'shared-iterations', vus: 1, iterations: Number(__ENV.STRATA_ITERATIONS || 18) },
  { ...thresholds({ rateLimited: 0 }), strata_errors: ['rate==0'] },
);

export default function (data) {
  const i = exec.scenario.iterationInTest;
  sendRequest(data.model, exec.vu.idInTest, COMBINATIONS[i % COMBINATIONS.length]);
}

export const handleSummary = summaryHandler('smoke');
