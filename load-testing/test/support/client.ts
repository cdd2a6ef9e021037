// A client for the fault tests: sends one request through the platform and records how it
// ended. Streams are parsed as they arrive, so a test can act on the first token.
import { authHeaders } from '../../src/harness.js';

export type Endpoint = 'generate' | 'completions' | 'chat';
const PATHS: Record<Endpoint, string> = {
  generate: '/v1/generate',
  completions: '/v1/completions',
  chat: '/v1/chat/completions',
};

export interface Outcome {
  /** HTTP status; 0 when the connection failed before a response. */
  status: number;
  backend: string | null;
  retryAfter: string | null;
  /** 'done': a done event, [DONE] after chunks, or a complete JSON body; 'error': an error event or error status. */
  terminal: 'done' | 'error' | undefined;
  errorCode: string | undefined;
  tokens: number;
  /** The client itself aborted (a disconnect the test chose). */
  aborted: boolean;
  networkError: string | undefined;
}

export interface SendOptions {
  endpoint?: Endpoint;
  stream?: boolean;
  body?: Record<string, unknown>;
  session?: string;
  signal?: AbortSignal;
  /** Called once the response headers are in, with the backend that serves the request. */
  onHeaders?: (backend: string | null) => void;
  /** Called with each parsed SSE payload ('[DONE]' as the string). */
  onEvent?: (event: unknown) => void;
}

function terminalOf(endpoint: Endpoint, event: unknown, outcome: Outcome): void {
  if (event === '[DONE]') {
    outcome.terminal ??= 'done';
    return;
  }
  const e = event as { type?: string; error?: { code?: string }; choices?: unknown[] };
  if (e.error) {
    outcome.terminal = 'error';
    outcome.errorCode = e.error.code;
  } else if (endpoint === 'generate' && e.type === 'token') outcome.tokens++;
  else if (endpoint === 'generate' && e.type === 'done') outcome.terminal = 'done';
  else if (endpoint !== 'generate' && Array.isArray(e.choices) && e.choices.length > 0) outcome.tokens++;
}

export async function send(baseUrl: string, apiKey: string, options: SendOptions = {}): Promise<Outcome> {
  const endpoint = options.endpoint ?? 'generate';
  const stream = options.stream ?? true;
  const body =
    endpoint === 'chat'
      ? { messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 32, stream, ...options.body }
      : { prompt: 'Once upon a time', max_tokens: 32, stream, ...options.body };
  const outcome: Outcome = {
    status: 0,
    backend: null,
    retryAfter: null,
    terminal: undefined,
    errorCode: undefined,
    tokens: 0,
    aborted: false,
    networkError: undefined,
  };
  try {
    const res = await fetch(`${baseUrl}${PATHS[endpoint]}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...authHeaders(apiKey),
        ...(options.session ? { 'x-session-id': options.session } : {}),
      },
      body: JSON.stringify(body),
      ...(options.signal ? { signal: options.signal } : {}),
    });
    outcome.status = res.status;
    outcome.backend = res.headers.get('x-strata-backend');
    outcome.retryAfter = res.headers.get('retry-after');
    options.onHeaders?.(outcome.backend);
    const isSse = (res.headers.get('content-type') ?? '').startsWith('text/event-stream');
    if (!isSse) {
      const json = (await res.json()) as {
        error?: { code?: string };
        finish_reason?: string;
        choices?: unknown[];
      };
      if (json.error) {
        outcome.terminal = 'error';
        outcome.errorCode = json.error.code;
      } else if (json.finish_reason !== undefined || Array.isArray(json.choices)) outcome.terminal = 'done';
      return outcome;
    }
    const decoder = new TextDecoder();
    let buffer = '';
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buffer += decoder.decode(chunk, { stream: true });
      for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = block
          .split('\n')
          .filter((l) => l.startsWith('data:'))
          .map((l) => l.slice(5).trimStart())
          .join('\n');
        if (data === '') continue;
        const event: unknown = data === '[DONE]' ? '[DONE]' : JSON.parse(data);
        terminalOf(endpoint, event, outcome);
        options.onEvent?.(event);
      }
    }
  } catch (err) {
    if (options.signal?.aborted) outcome.aborted = true;
    else outcome.networkError = (err as Error).message;
  }
  return outcome;
}
