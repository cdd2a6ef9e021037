// Per-request metrics. k6's HTTP client hands over a response only once it is complete, so the
// streaming figures come from its timings: TTFT = timings.waiting (request sent -> first
// response byte; the router sends nothing before the backend's first event), ITL = the rest of
// the stream spread over the tokens after the first. See docs/reliability.md for the precision.
import { Counter, Rate, Trend } from 'k6/metrics';

export const metrics = {
  /** ms from sending the request to its first byte; streaming requests only. */
  ttft: new Trend('strata_ttft_ms', true),
  /** Mean ms between tokens within one streaming request: receiving time / (tokens - 1). */
  itl: new Trend('strata_itl_ms', true),
  /** ms for the whole request. */
  e2e: new Trend('strata_e2e_ms', true),
  /** Output tokens per second of one request (output tokens / e2e). */
  tokensPerSecond: new Trend('strata_tokens_per_s'),
  outputTokens: new Counter('strata_output_tokens'),
  inputTokens: new Counter('strata_input_tokens'),
  /** 1 for a failed request: a status other than 200/429, an error event, a missing terminal event. */
  errors: new Rate('strata_errors'),
  /** 1 for a 429 (quota or admission control shed it). */
  rateLimited: new Rate('strata_rate_limited'),
  /** 200 responses whose stream or body ended without a terminal event: must stay 0. */
  incomplete: new Counter('strata_incomplete'),
  requests: new Counter('strata_requests'),
};
