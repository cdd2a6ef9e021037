// Reads the token usage out of a response as it passes to the client, without delaying it: the
// `done` event of a /v1/generate stream, the usage chunk of an OpenAI stream, or the `usage` of
// a JSON body. For OpenAI streams the edge asks the backend for the usage chunk
// (stream_options.include_usage) even when the client did not; then this tap removes that chunk
// so the client sees exactly what it asked for.

/** Tokens in a usage object of either API: prompt + generated. */
export function usageTokens(usage: unknown): number | undefined {
  if (typeof usage !== 'object' || usage === null) return undefined;
  const u = usage as Record<string, unknown>;
  const n = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : undefined);
  const total = n(u.total_tokens);
  if (total !== undefined) return total;
  const input = n(u.input_tokens) ?? n(u.prompt_tokens);
  const output = n(u.output_tokens) ?? n(u.completion_tokens);
  return input === undefined && output === undefined ? undefined : (input ?? 0) + (output ?? 0);
}

export interface UsageTap {
  /** What to pass to the client for this upstream chunk: the chunk, part of it, or nothing. */
  push(chunk: Buffer): Buffer | undefined;
  /** What is left when the upstream ends (an unterminated last event). */
  flush(): Buffer | undefined;
  /** Tokens used; when no usage arrived (the stream broke off), the token events seen. */
  tokens(): number;
}

// Bodies larger than this are passed on but not parsed for usage (JSON answers are small).
const MAX_JSON_BYTES = 4 * 1024 * 1024;

export function jsonUsageTap(): UsageTap {
  const parts: Buffer[] = [];
  let size = 0;
  return {
    push(chunk) {
      size += chunk.length;
      if (size <= MAX_JSON_BYTES) parts.push(chunk);
      return chunk;
    },
    flush: () => undefined,
    tokens() {
      if (size > MAX_JSON_BYTES || parts.length === 0) return 0;
      try {
        return (
          usageTokens((JSON.parse(Buffer.concat(parts).toString('utf8')) as { usage?: unknown }).usage) ?? 0
        );
      } catch {
        return 0; // not JSON (an upstream error page): nothing was generated
      }
    },
  };
}

const EVENT_END = '\n\n';

/**
 * An SSE tap. `dropUsageChunk`: remove the OpenAI usage chunk (`choices: []` with `usage`) that
 * the edge asked for on the client's behalf.
 */
export function sseUsageTap(options: { dropUsageChunk: boolean }): UsageTap {
  let pending = ''; // text of an event not yet terminated
  let usage: number | undefined;
  let tokenEvents = 0;

  // Looks at one complete event; false when it must not reach the client.
  const inspect = (event: string): boolean => {
    if (!event.startsWith('data: {')) return true; // heartbeats, [DONE]
    if (event.includes('"usage"')) {
      try {
        const data = JSON.parse(event.slice('data: '.length)) as { usage?: unknown; choices?: unknown };
        const tokens = usageTokens(data.usage);
        if (tokens !== undefined) {
          usage = tokens;
          if (options.dropUsageChunk && Array.isArray(data.choices) && data.choices.length === 0)
            return false;
        }
      } catch {
        // not JSON: pass it on untouched
      }
    } else if (!event.startsWith('data: {"error"') && !event.startsWith('data: {"type":"error"')) {
      tokenEvents++;
    }
    return true;
  };

  return {
    push(chunk) {
      const carried = pending;
      const text = carried + chunk.toString('utf8');
      const end = text.lastIndexOf(EVENT_END);
      if (end < 0) {
        pending = text;
        return undefined;
      }
      const complete = text.slice(0, end + EVENT_END.length);
      pending = text.slice(end + EVENT_END.length);
      const events = complete.split(EVENT_END).slice(0, -1);
      const kept = events.filter(inspect);
      // The usual case: whole events, nothing removed; the upstream's bytes go on unchanged.
      if (kept.length === events.length && carried === '' && pending === '') return chunk;
      return kept.length === 0 ? undefined : Buffer.from(kept.map((e) => e + EVENT_END).join(''), 'utf8');
    },
    flush() {
      const rest = pending;
      pending = '';
      return rest === '' ? undefined : Buffer.from(rest, 'utf8');
    },
    tokens: () => usage ?? tokenEvents,
  };
}
