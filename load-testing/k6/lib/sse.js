// Parses a complete SSE body into the JSON payloads of its `data:` events (comments such as
// heartbeats are skipped; "[DONE]" comes back as the string).
export function sseEvents(body) {
  const events = [];
  for (const block of String(body).split(/\r?\n\r?\n/)) {
    const data = block
      .split(/\r?\n/)
      .filter((line) => line.startsWith('data:'))
      .map((line) => line.slice(5).replace(/^ /, ''))
      .join('\n');
    if (data === '') continue;
    if (data === '[DONE]') {
      events.push('[DONE]');
      continue;
    }
    try {
      events.push(JSON.parse(data));
    } catch {
      events.push({ unparsable: data });
    }
  }
  return events;
}

/**
 * Reads a streamed response of either protocol into
 * { tokens, inputTokens, terminal: 'done' | 'error' | undefined, error }.
 * /v1/generate: token events, then done or error. OpenAI: chunks, an optional usage chunk, an
 * optional {"error":...} chunk, then [DONE].
 */
export function readStream(endpoint, body) {
  const events = sseEvents(body);
  const out = { tokens: 0, inputTokens: 0, terminal: undefined, error: undefined };
  for (const event of events) {
    if (endpoint === 'generate') {
      if (event.type === 'token') out.tokens++;
      else if (event.type === 'done') {
        out.terminal = 'done';
        out.tokens = event.usage?.output_tokens ?? out.tokens;
        out.inputTokens = event.usage?.input_tokens ?? 0;
      } else if (event.type === 'error') {
        out.terminal = 'error';
        out.error = event.error;
      }
      continue;
    }
    if (event === '[DONE]') {
      if (out.terminal === undefined) out.terminal = 'done';
    } else if (event.error) {
      out.terminal = 'error';
      out.error = event.error;
    } else if (event.usage) {
      out.tokens = event.usage.completion_tokens ?? out.tokens;
      out.inputTokens = event.usage.prompt_tokens ?? 0;
    } else if (Array.isArray(event.choices)) {
      const choice = event.choices[0];
      const text = choice?.text ?? choice?.delta?.content;
      if (typeof text === 'string' && text !== '' && !event.usage) out.tokens++;
    }
  }
  return out;
}
