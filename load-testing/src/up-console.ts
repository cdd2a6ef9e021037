// What `strata-platform up` prints instead of the services' JSON log lines (those go to files):
// one line per request, from the outermost service it passed (edge, else router, else backend);
// the model loading and becoming ready; every warning and error; each in one short line.
import type { ServiceName } from './platform.js';

export type LogRecord = Record<string, unknown>;

/** A pino JSON line as an object; undefined for anything else (a stack trace, a Node warning). */
export function parseLogLine(line: string): LogRecord | undefined {
  if (!line.startsWith('{')) return undefined;
  try {
    const value: unknown = JSON.parse(line);
    return value !== null && typeof value === 'object' && !Array.isArray(value)
      ? (value as LogRecord)
      : undefined;
  } catch {
    return undefined;
  }
}

const LEVELS: Record<string, number> = { trace: 10, debug: 20, info: 30, warn: 40, error: 50, fatal: 60 };

/** pino's numeric level; the services log it as a label ("warn"). */
export function levelOf(record: LogRecord): number {
  const level = record.level;
  if (typeof level === 'number') return level;
  return (typeof level === 'string' ? LEVELS[level] : undefined) ?? 30;
}

function levelLabel(record: LogRecord): string {
  if (typeof record.level === 'string') return record.level.toUpperCase();
  const n = levelOf(record);
  return (Object.entries(LEVELS).find(([, v]) => v === n)?.[0] ?? `level ${n}`).toUpperCase();
}

/** HH:MM:SS in local time, of the line's ISO time (now when it has none). */
export function clock(time: unknown): string {
  const date = typeof time === 'string' && !Number.isNaN(Date.parse(time)) ? new Date(time) : new Date();
  return [date.getHours(), date.getMinutes(), date.getSeconds()]
    .map((n) => String(n).padStart(2, '0'))
    .join(':');
}

const num = (value: unknown): number | undefined =>
  typeof value === 'number' && Number.isFinite(value) ? value : undefined;
const str = (value: unknown): string | undefined =>
  typeof value === 'string' && value !== '' ? value : undefined;

/** What the other services' lines told about one request. */
export interface RequestDetails {
  /** The backend's "request finished". */
  promptTokens?: number;
  outputTokens?: number;
  ttftMs?: number;
  /** The edge's "request forwarded": prompt and output tokens charged to the tenant. */
  tokens?: number;
  /** The router's "route decision". */
  backend?: string;
  /** A "request rejected": its catalogue code and message. */
  rejected?: string;
}

/** Takes from a log line what a request's console line shows; returns whether it had any. */
export function collectDetails(record: LogRecord, details: RequestDetails): boolean {
  switch (record.msg) {
    case 'request finished':
      details.promptTokens = num(record.prompt_tokens);
      details.outputTokens = num(record.output_tokens);
      details.ttftMs = num(record.ttft_ms);
      return true;
    case 'request forwarded':
      details.tokens = num(record.tokens);
      return true;
    case 'route decision':
      details.backend = str(record.choice);
      return true;
    case 'request rejected': {
      const code = str(record.code);
      // The innermost service's reason is the first to arrive and the most precise.
      details.rejected ??= [code, str(record.message)].filter(Boolean).join(' ');
      return true;
    }
    default:
      return false;
  }
}

/**
 * One line for a "request completed" record, e.g.
 * `12:03:04 edge-gateway POST /v1/chat/completions 200 412 ms, 31 prompt + 8 output tokens, first token 103 ms, backend local`.
 */
export function formatRequestLine(
  service: string,
  completed: LogRecord,
  details: RequestDetails = {},
  width = 0,
): string {
  const duration = num(completed.duration_ms);
  const parts = [
    [
      clock(completed.time),
      service.padEnd(width),
      str(completed.method) ?? '?',
      str(completed.url) ?? '?',
      String(completed.status ?? '?'),
      duration === undefined ? '? ms' : `${Math.round(duration)} ms`,
    ].join(' '),
  ];
  if (details.promptTokens !== undefined && details.outputTokens !== undefined) {
    parts.push(`${details.promptTokens} prompt + ${details.outputTokens} output tokens`);
  } else if (details.tokens) {
    parts.push(`${details.tokens} tokens`);
  }
  if (details.ttftMs !== undefined) parts.push(`first token ${Math.round(details.ttftMs)} ms`);
  if (details.backend) parts.push(`backend ${details.backend}`);
  if (details.rejected) parts.push(details.rejected);
  return parts.join(', ');
}

// Fields every line has, or that the problem line shows otherwise.
const COMMON_FIELDS = new Set(['level', 'time', 'service', 'msg', 'pid', 'hostname', 'err', 'trace_id']);

function errorText(err: unknown): string | undefined {
  if (typeof err === 'string') return err;
  if (err !== null && typeof err === 'object' && 'message' in err) return String(err.message);
  return undefined;
}

/** A warning or error in one line: level, message, the error's message, the other fields as k=v. */
export function formatProblemLine(service: string, record: LogRecord, width = 0): string {
  let text = `${clock(record.time)} ${service.padEnd(width)} ${levelLabel(record)} ${String(record.msg ?? '')}`;
  const err = errorText(record.err);
  if (err) text += `: ${err}`;
  const fields = Object.entries(record)
    .filter(([key, value]) => !COMMON_FIELDS.has(key) && value !== undefined && value !== null)
    .map(([key, value]) => `${key}=${typeof value === 'object' ? JSON.stringify(value) : String(value)}`);
  return fields.length > 0 ? `${text} (${fields.join(' ')})` : text;
}

/** The info lines worth a console line: the model loaded and warmed up, backends turning (not) ready. */
export function milestoneText(record: LogRecord): string | undefined {
  switch (record.msg) {
    case 'model loaded': {
      const seconds = num(record.load_seconds);
      return `model ${str(record.model) ?? '?'} loaded${seconds === undefined ? '' : ` in ${seconds.toFixed(1)} s`}`;
    }
    case 'warmup done': {
      const warmup = (record.warmup ?? {}) as LogRecord;
      const seconds = num(warmup.seconds);
      return `warmup done: ${num(warmup.requests) ?? '?'} requests${seconds === undefined ? '' : ` in ${seconds.toFixed(1)} s`}`;
    }
    case 'backend ready':
    case 'backend not ready':
    case 'backend recovered after ejection':
      return record.msg.replace('backend', `backend ${str(record.backend) ?? '?'}`);
    default:
      return undefined;
  }
}

// A request through the edge is logged by the edge, the router and the backend; the console shows
// the outermost one. Lower is outer; the sidecar is nobody's upstream.
const DEPTH: Record<ServiceName, number> = {
  'edge-gateway': 0,
  observability: 0,
  'router-service': 1,
  'inference-backend': 2,
};

// Requests remembered at once (details of requests still running, ids already shown).
const REMEMBERED = 2_000;

function remember<V>(map: Map<string, V>, key: string, value: V): void {
  map.set(key, value);
  if (map.size > REMEMBERED) map.delete(map.keys().next().value as string);
}

export interface UpConsoleOptions {
  write: (text: string) => void;
  /** A line per request (default true); without, only milestones, problems and exits. */
  requests?: boolean;
  /**
   * How long an inner service's request line waits for an outer one's before it is shown: the
   * services log to separate pipes, so the edge's line may arrive after the router's.
   */
  holdMs?: number;
  /** Width the service names are padded to. */
  width?: number;
}

export class UpConsole {
  private readonly details = new Map<string, RequestDetails>();
  private readonly shown = new Map<string, true>();
  private readonly held = new Map<string, { depth: number; timer: NodeJS.Timeout; show: () => void }>();
  private readonly requests: boolean;
  private readonly holdMs: number;
  private readonly width: number;

  constructor(private readonly options: UpConsoleOptions) {
    this.requests = options.requests ?? true;
    this.holdMs = options.holdMs ?? 500;
    this.width = options.width ?? 0;
  }

  /** One line a service printed. */
  line(service: ServiceName, line: string): void {
    const record = parseLogLine(line);
    if (!record) {
      // Not a log line: a crash's stack trace, a warning from Node itself.
      this.print(`${clock(undefined)} ${service.padEnd(this.width)} | ${line}`);
      return;
    }
    if (levelOf(record) >= 40) {
      this.print(formatProblemLine(service, record, this.width));
      return;
    }
    const id = str(record.request_id);
    if (id !== undefined && this.requests && !this.shown.has(id)) {
      if (record.msg === 'request completed') {
        this.completed(service, id, record);
        return;
      }
      const details = this.details.get(id) ?? {};
      if (collectDetails(record, details)) remember(this.details, id, details);
    }
    const milestone = milestoneText(record);
    if (milestone) this.print(`${clock(record.time)} ${service.padEnd(this.width)} ${milestone}`);
  }

  /** A line for a service that exited when nobody stopped it. */
  exited(service: ServiceName, code: number | null, signal: NodeJS.Signals | null, log: string): void {
    const how = signal ? `killed by ${signal}` : `exit code ${code}`;
    this.print(`${clock(undefined)} ${service.padEnd(this.width)} EXITED (${how}); its log: ${log}`);
  }

  /** Shows the request lines still held back, now. */
  flush(): void {
    for (const held of [...this.held.values()]) {
      clearTimeout(held.timer);
      held.show();
    }
  }

  private completed(service: ServiceName, id: string, record: LogRecord): void {
    const depth = DEPTH[service];
    const held = this.held.get(id);
    if (held && held.depth <= depth) return; // an outer service's line is waiting
    if (held) clearTimeout(held.timer);
    this.held.delete(id);
    const show = () => {
      this.held.delete(id);
      remember(this.shown, id, true);
      this.print(formatRequestLine(service, record, this.details.get(id), this.width));
      this.details.delete(id);
    };
    if (depth === 0) {
      show();
      return;
    }
    const timer = setTimeout(show, this.holdMs);
    timer.unref();
    this.held.set(id, { depth, timer, show });
  }

  private print(text: string): void {
    this.options.write(`${text}\n`);
  }
}
