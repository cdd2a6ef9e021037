import { describe, expect, it } from 'vitest';
import { sumSamples } from '../src/backend/prom-text.js';

const TEXT = `# HELP vllm:num_preemptions_total Cumulative number of preemptions from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{model_name="a",service="inference-backend"} 3
vllm:num_preemptions_total{model_name="b {x}",service="inference-backend"} 4 1700000000000
vllm:num_preemptions_total_created 1
vllm:num_requests_waiting 2
`;

describe('sumSamples', () => {
  it('sums every label set of one name and ignores look-alike names', () => {
    expect(sumSamples(TEXT, 'vllm:num_preemptions_total')).toBe(7);
    expect(sumSamples(TEXT, 'vllm:num_requests_waiting')).toBe(2);
    expect(sumSamples(TEXT, 'vllm:absent')).toBeUndefined();
  });
});
