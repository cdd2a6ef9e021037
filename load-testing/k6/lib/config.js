// Every knob of the suites, from the environment (k6 -e NAME=value or exported variables), so
// the same scripts run against the local harness and against a user's cluster.
const env = __ENV;

function num(name, fallback) {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value)) throw new Error(`${name} must be a number, got "${raw}"`);
  return value;
}

function str(name, fallback) {
  const raw = env[name];
  return raw === undefined || raw === '' ? fallback : raw;
}

// "short:60,medium:30,long:10" -> [['short', 0.6], ['medium', 0.3], ['long', 0.1]]
function weights(name, fallback) {
  const pairs = str(name, fallback)
    .split(',')
    .map((part) => part.split(':'))
    .map(([key, weight]) => [key.trim(), Number(weight ?? 1)]);
  const total = pairs.reduce((sum, [, w]) => sum + w, 0);
  return pairs.map(([key, w]) => [key, w / total]);
}

/** "90s" | "2m" | "1h" -> seconds. */
export function seconds(duration) {
  const m = /^(\d+)(s|m|h)$/.exec(duration);
  if (!m) throw new Error(`STRATA_DURATION must look like 90s, 2m or 1h, got "${duration}"`);
  return Number(m[1]) * { s: 1, m: 60, h: 3600 }[m[2]];
}

export const config = {
  /** Base URL of the edge (or any hop that serves the public API). */
  target: str('STRATA_TARGET_URL', 'http://127.0.0.1:8080').replace(/\/+$/, ''),
  /** Sent as "Authorization: Bearer <key>" when set. */
  apiKey: str('STRATA_API_KEY', ''),
  /** Model name; empty: the first one GET /v1/models lists (or the server's default). */
  model: str('STRATA_MODEL', ''),
  /** Which endpoints each iteration picks from, with weights. */
  endpoints: weights('STRATA_ENDPOINTS', 'generate:2,completions:1,chat:1'),
  /** Fraction of requests that stream (SSE); the rest ask for one JSON response. */
  streamRatio: num('STRATA_STREAM_RATIO', 0.75),
  prompts: weights('STRATA_PROMPT_MIX', 'short:60,medium:30,long:10'),
  /** Fraction of prompts that start with one of a few shared prefixes (prefix caching, affinity). */
  sharedPrefixRatio: num('STRATA_SHARED_PREFIX_RATIO', 0.5),
  /** Distinct x-session-id values; 0 sends none. */
  sessions: num('STRATA_SESSIONS', 32),
  maxTokens: num('STRATA_MAX_TOKENS', 48),
  temperature: num('STRATA_TEMPERATURE', 0.8),
  /** Per-request timeout (k6 syntax). */
  timeout: str('STRATA_REQUEST_TIMEOUT', '120s'),

  /** Arrival rate in requests/s for steady and soak; the base rate of ramp and spike. */
  rate: num('STRATA_RATE', 4),
  /** ramp: the rate at the top; spike: the rate during the spike. */
  peakRate: num('STRATA_PEAK_RATE', 0),
  duration: str('STRATA_DURATION', ''),
  vus: num('STRATA_VUS', 0),
  maxVus: num('STRATA_MAX_VUS', 200),

  thresholds: {
    /** p95 time to first token (ms) that must hold. */
    ttftP95Ms: num('STRATA_TTFT_P95_MS', 5000),
    /** Allowed fraction of failed requests (429s not counted: they are load shedding). */
    errorRate: num('STRATA_MAX_ERROR_RATE', 0.01),
    /** Allowed fraction of 429s. */
    rateLimitedRate: num('STRATA_MAX_RATE_LIMITED', 0.05),
  },
  /** Where handleSummary writes the JSON summary. */
  summaryJson: str('STRATA_SUMMARY_JSON', 'k6-summary.json'),
  /** Label saved in the summary (the harness sets "local harness, 2 CPU backends"). */
  label: str('STRATA_RUN_LABEL', ''),
};
