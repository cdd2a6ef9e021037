// The one error catalogue of the platform. Codes are stable API: clients and dashboards key on
// them, so a code is never renamed or reused; add new ones instead.

export type ErrorType = 'invalid_request' | 'auth' | 'rate_limit' | 'overloaded' | 'internal';

export interface CatalogueEntry {
  status: number;
  type: ErrorType;
  /** Default message; call sites usually pass a specific one that says what to change. */
  message: string;
}

export const ERROR_CATALOGUE = {
  STRATA_INVALID_REQUEST: { status: 400, type: 'invalid_request', message: 'The request is invalid.' },
  STRATA_INVALID_GRAMMAR: {
    status: 400,
    type: 'invalid_request',
    message: 'The structured-output constraint (JSON schema, regex, choice or grammar) cannot be used.',
  },
  STRATA_GRAMMAR_UNAVAILABLE: {
    status: 400,
    type: 'invalid_request',
    message: 'This backend cannot constrain output: its engine was built without the grammar engine.',
  },
  STRATA_INVALID_PARAM: {
    status: 400,
    type: 'invalid_request',
    message: 'A request parameter is out of range.',
  },
  STRATA_PROMPT_TOO_LONG: {
    status: 400,
    type: 'invalid_request',
    message: "The prompt does not fit in the model's context.",
  },
  STRATA_INVALID_JSON: {
    status: 400,
    type: 'invalid_request',
    message: 'The request body is not valid JSON.',
  },
  STRATA_BODY_TOO_DEEP: {
    status: 400,
    type: 'invalid_request',
    message: 'The JSON body is nested too deeply.',
  },
  STRATA_INVALID_ENCODING: {
    status: 400,
    type: 'invalid_request',
    message: 'The request holds text that is not valid UTF-8.',
  },
  STRATA_NO_CHAT_TEMPLATE: {
    status: 400,
    type: 'invalid_request',
    message: 'This model has no chat template; use /v1/completions.',
  },
  STRATA_CHAT_TEMPLATE: {
    status: 400,
    type: 'invalid_request',
    message: 'The chat template rejected the messages.',
  },
  STRATA_DUPLICATE_REQUEST: {
    status: 409,
    type: 'invalid_request',
    message: 'A request with this id is running.',
  },
  STRATA_UNAUTHORIZED: { status: 401, type: 'auth', message: 'A valid API key is required.' },
  STRATA_FORBIDDEN: { status: 403, type: 'auth', message: 'This key may not perform this request.' },
  // Router and backends: a request that did not come through the edge (identity.ts).
  STRATA_IDENTITY_INVALID: {
    status: 401,
    type: 'auth',
    message: 'The request carries no valid platform identity; send it through the edge.',
  },
  STRATA_NOT_FOUND: { status: 404, type: 'invalid_request', message: 'No such route.' },
  STRATA_MODEL_NOT_FOUND: {
    status: 404,
    type: 'invalid_request',
    message: 'The requested model is not served.',
  },
  STRATA_METHOD_NOT_ALLOWED: {
    status: 405,
    type: 'invalid_request',
    message: 'Method not allowed on this route.',
  },
  STRATA_REQUEST_TIMEOUT: {
    status: 408,
    type: 'invalid_request',
    message: 'The request was not received in time.',
  },
  STRATA_BODY_TOO_LARGE: { status: 413, type: 'invalid_request', message: 'The request body is too large.' },
  STRATA_UNSUPPORTED_MEDIA_TYPE: {
    status: 415,
    type: 'invalid_request',
    message: 'Send the body as application/json.',
  },
  STRATA_HEADERS_TOO_LARGE: {
    status: 431,
    type: 'invalid_request',
    message: 'The request headers are too large.',
  },
  STRATA_RATE_LIMITED: { status: 429, type: 'rate_limit', message: 'Too many requests; retry later.' },
  STRATA_QUOTA_EXCEEDED: { status: 429, type: 'rate_limit', message: "The tenant's token quota is used up." },
  STRATA_QUEUE_FULL: { status: 429, type: 'overloaded', message: 'The waiting queue is full; retry later.' },
  STRATA_CLIENT_CLOSED: { status: 499, type: 'invalid_request', message: 'The client closed the request.' },
  STRATA_INTERNAL: { status: 500, type: 'internal', message: 'Internal error.' },
  STRATA_ENGINE_ERROR: { status: 500, type: 'internal', message: 'The inference engine failed.' },
  // Engine and model start-up failures: the operator's configuration or files, not the client's.
  STRATA_INVALID_CONFIG: { status: 500, type: 'internal', message: 'An engine setting is out of range.' },
  STRATA_KV_CAPACITY: {
    status: 500,
    type: 'internal',
    message: 'The KV cache cannot hold one full-length sequence.',
  },
  STRATA_MODEL_CONFIG: {
    status: 500,
    type: 'internal',
    message: "The model's config.json is missing or invalid.",
  },
  STRATA_MODEL_WEIGHTS: {
    status: 500,
    type: 'internal',
    message: "The model's weights are missing or invalid.",
  },
  STRATA_MODEL_FILES: {
    status: 500,
    type: 'internal',
    message: "The model's tokenizer or config files are invalid.",
  },
  STRATA_UNKNOWN_ARCHITECTURE: {
    status: 500,
    type: 'internal',
    message: "The model's architecture is not supported.",
  },
  STRATA_CONVERT: { status: 500, type: 'internal', message: 'The checkpoint could not be converted.' },
  STRATA_BACKEND_INPUT: {
    status: 500,
    type: 'internal',
    message: 'The model backend was given a batch it cannot run.',
  },
  STRATA_UNKNOWN_REQUEST: { status: 500, type: 'internal', message: 'The engine has no such request.' },
  STRATA_OUT_OF_MEMORY: { status: 500, type: 'internal', message: 'The engine ran out of memory.' },
  STRATA_CUDA_ERROR: { status: 500, type: 'internal', message: 'A CUDA call of the engine failed.' },
  STRATA_ENGINE_CLOSED: { status: 503, type: 'overloaded', message: 'The engine is shut down.' },
  STRATA_UPSTREAM_ERROR: { status: 502, type: 'internal', message: 'The upstream service failed.' },
  STRATA_NOT_READY: { status: 503, type: 'overloaded', message: 'The service is not ready.' },
  STRATA_DRAINING: { status: 503, type: 'overloaded', message: 'The service is shutting down.' },
  STRATA_QUOTA_UNAVAILABLE: {
    status: 503,
    type: 'overloaded',
    message: 'Quotas cannot be checked now; retry later.',
  },
  STRATA_NO_BACKEND: { status: 503, type: 'overloaded', message: 'No backend can serve this request now.' },
  STRATA_UPSTREAM_TIMEOUT: { status: 504, type: 'overloaded', message: 'The upstream service timed out.' },
  STRATA_TIMEOUT: { status: 504, type: 'overloaded', message: 'The request deadline passed.' },
} as const satisfies Record<string, CatalogueEntry>;

export type ErrorCode = keyof typeof ERROR_CATALOGUE;

export interface ErrorBody {
  error: { code: ErrorCode; message: string; type: ErrorType; details?: unknown };
}

export class StrataError extends Error {
  readonly code: ErrorCode;
  readonly statusCode: number;
  readonly type: ErrorType;
  readonly details: unknown;
  /** Seconds a client should wait before retrying (Retry-After); set for every 429. */
  readonly retryAfterSeconds: number | undefined;

  constructor(
    code: ErrorCode,
    message?: string,
    options?: { details?: unknown; cause?: unknown; retryAfterSeconds?: number },
  ) {
    const entry: CatalogueEntry = ERROR_CATALOGUE[code];
    super(message ?? entry.message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'StrataError';
    this.code = code;
    this.statusCode = entry.status;
    this.type = entry.type;
    this.details = options?.details;
    this.retryAfterSeconds = options?.retryAfterSeconds ?? (entry.status === 429 ? 1 : undefined);
  }

  toBody(): ErrorBody {
    const error: ErrorBody['error'] = { code: this.code, message: this.message, type: this.type };
    if (this.details !== undefined) error.details = this.details;
    return { error };
  }
}

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && Object.hasOwn(ERROR_CATALOGUE, value);
}

/** JSON schema of the error body, for Fastify response schemas of every error status. */
export const errorBodyJsonSchema = {
  type: 'object',
  required: ['error'],
  properties: {
    error: {
      type: 'object',
      required: ['code', 'message', 'type'],
      properties: {
        code: { type: 'string', enum: Object.keys(ERROR_CATALOGUE) },
        message: { type: 'string' },
        type: { type: 'string', enum: ['invalid_request', 'auth', 'rate_limit', 'overloaded', 'internal'] },
        details: {},
      },
    },
  },
} as const;
