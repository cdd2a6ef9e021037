// Real service processes for the stack tests: backends, router, edge and sidecars from their
// built dist/main.js on free ports, every JSON log line kept for assertions.
import {
  type LoggedServiceProcess,
  serviceEntry,
  startLoggedServiceProcess,
  testModelDir,
} from '@strata/common/testing';

export interface LoggedService extends LoggedServiceProcess {
  /** host:port, for scrape targets. */
  hostPort: string;
}

const ENTRIES = {
  backend: '@strata/inference-backend',
  router: '@strata/router-service',
  edge: '@strata/edge-gateway',
} as const;

export async function startLogged(
  name: string,
  entry: keyof typeof ENTRIES | 'sidecar',
  env: Record<string, string>,
): Promise<LoggedService> {
  const path =
    entry === 'sidecar'
      ? new URL('../../dist/main.js', import.meta.url).pathname
      : serviceEntry(ENTRIES[entry], import.meta.url);
  const service = await startLoggedServiceProcess(name, path, { env, startTimeoutMs: 120_000 });
  return { ...service, hostPort: new URL(service.url).host };
}

/** The small test model's directory, from STRATA_MODELS_DIR. */
export const modelDir = () => testModelDir('tinystories-656k');
export const MODEL = 'tinystories-656k';

/** Token ids of the small model's vocabulary (2048), avoiding BOS/EOS: a prompt of `n` tokens. */
export function randomTokens(n: number, seed: number): number[] {
  let x = seed * 2654435761;
  return Array.from({ length: n }, () => {
    x = (x * 1103515245 + 12345) % 2147483648;
    return 3 + (x % 2000);
  });
}

export interface StreamResult {
  status: number;
  events: Record<string, unknown>[];
}

/** POSTs a JSON body and, for SSE answers, collects every data: event; `onEvent` sees each. */
export async function postJson(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
  onEvent?: (event: Record<string, unknown>) => void,
): Promise<StreamResult> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  const events: Record<string, unknown>[] = [];
  if (!(response.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
    await response.arrayBuffer();
    return { status: response.status, events };
  }
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of response.body as ReadableStream<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    let end = buffer.indexOf('\n\n');
    while (end >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of frame.split('\n')) {
        if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
        const event = JSON.parse(line.slice(6)) as Record<string, unknown>;
        events.push(event);
        onEvent?.(event);
      }
      end = buffer.indexOf('\n\n');
    }
  }
  return { status: response.status, events };
}

/** The sidecar's current saturation state, from its /metrics. */
export async function saturationState(sidecarUrl: string): Promise<string | undefined> {
  const text = await (await fetch(`${sidecarUrl}/metrics`)).text();
  return /^strata_saturation_state\{state="(\w+)"[^}]*\} 1$/m.exec(text)?.[1];
}
