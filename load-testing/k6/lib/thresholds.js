// The thresholds every suite holds; the spike suite loosens the share of 429s it accepts.
import { config } from './config.js';

export function thresholds({ rateLimited = config.thresholds.rateLimitedRate } = {}) {
  return {
    strata_errors: [`rate<=${config.thresholds.errorRate}`],
    strata_rate_limited: [`rate<=${rateLimited}`],
    strata_incomplete: ['count==0'],
    strata_ttft_ms: [`p(95)<${config.thresholds.ttftP95Ms}`],
    checks: [`rate>=${1 - config.thresholds.errorRate}`],
  };
}
