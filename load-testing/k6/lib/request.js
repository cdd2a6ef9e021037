// One request of the mix: picks an endpoint, streaming or not, a prompt and a session; sends it;
// checks that it ended properly (a terminal event, or a complete JSON body, or a clear error)
// and records the per-request metrics.
import { check } from 'k6';
import http from 'k6/http';
import { config } from './config.js';
import { metrics } from './metrics.js';
import { makePrompt, pick, sessionId } from './prompts.js';
import { readStream } from './sse.js';

const PATHS = { generate: '/v1/generate', completions: '/v1/completions', chat: '/v1/chat/completions' };

// 429 is load shedding, not a failure of the platform: keep it out of http_req_failed.
http.setResponseCallback(http.expectedStatuses(200, 429));

/** setup(): the model to ask for (STRATA_MODEL, else the first one /v1/models lists). */
export function discoverModel() {
  if (config.model) return config.model;
  const res = http.get(`${config.target}/v1/models`, { headers: authHeaders(), tags: { name: 'models' } });
  if (res.status !== 200) return '';
  try {
    return res.json('data.0.id') ?? '';
  } catch {
    return '';
  }
}

function authHeaders() {
  return config.apiKey ? { authorization: `Bearer ${config.apiKey}` } : {};
}

function requestBody(endpoint, stream, prompt, model) {
  const common = {
    ...(model ? { model } : {}),
    max_tokens: config.maxTokens,
    temperature: config.temperature,
    stream,
  };
  if (endpoint === 'generate') return { ...common, prompt };
  const usage = stream ? { stream_options: { include_usage: true } } : {};
  if (endpoint === 'completions') return { ...common, ...usage, prompt };
  return { ...common, ...usage, messages: [{ role: 'user', content: prompt }] };
}

// Output and input tokens of a complete JSON response.
function readJson(endpoint, res) {
  try {
    const body = res.json();
    const usage = body.usage ?? {};
    const complete =
      endpoint === 'generate' ? typeof body.finish_reason === 'string' : Array.isArray(body.choices);
    return {
      terminal: complete ? 'done' : undefined,
      tokens: usage.output_tokens ?? usage.completion_tokens ?? 0,
      inputTokens: usage.input_tokens ?? usage.prompt_tokens ?? 0,
    };
  } catch {
    return { terminal: undefined, tokens: 0, inputTokens: 0 };
  }
}

/**
 * Sends one request. `forced` = { endpoint, stream } pins the choice (smoke walks through every
 * combination); otherwise both come from the configured mix.
 */
export function sendRequest(model, vu, forced) {
  const endpoint = forced?.endpoint ?? pick(config.endpoints);
  const stream = forced?.stream ?? Math.random() < config.streamRatio;
  const prompt = makePrompt();
  const session = sessionId(vu);
  const tags = { endpoint, stream: String(stream), prompt: prompt.kind };
  const res = http.post(
    `${config.target}${PATHS[endpoint]}`,
    JSON.stringify(requestBody(endpoint, stream, prompt.text, model)),
    {
      headers: {
        'content-type': 'application/json',
        ...authHeaders(),
        ...(session ? { 'x-session-id': session } : {}),
      },
      timeout: config.timeout,
      tags: { ...tags, name: PATHS[endpoint] },
    },
  );

  metrics.requests.add(1, tags);
  metrics.rateLimited.add(res.status === 429, tags);
  if (res.status === 429) {
    check(res, { '429 carries Retry-After': (r) => r.headers['Retry-After'] !== undefined });
    return;
  }
  const result =
    res.status === 200 ? (stream ? readStream(endpoint, res.body) : readJson(endpoint, res)) : undefined;
  const ok = result?.terminal === 'done';
  if (res.status === 200 && result?.terminal === undefined) metrics.incomplete.add(1, tags);
  metrics.errors.add(!ok, tags);
  check(res, {
    'status is 200': (r) => r.status === 200,
    'ends with a terminal event or a complete body': () => result?.terminal !== undefined,
    'no error event': () => result?.terminal !== 'error',
  });
  if (!ok) return;

  const e2e = res.timings.duration;
  metrics.e2e.add(e2e, tags);
  metrics.outputTokens.add(result.tokens, tags);
  metrics.inputTokens.add(result.inputTokens, tags);
  if (e2e > 0) metrics.tokensPerSecond.add((result.tokens * 1000) / e2e, tags);
  if (stream) {
    metrics.ttft.add(res.timings.waiting, tags);
    if (result.tokens > 1) metrics.itl.add(res.timings.receiving / (result.tokens - 1), tags);
  }
}
