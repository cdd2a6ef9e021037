// Request bodies (snake_case, OpenAI/vLLM names) -> engine parameters, and the platform fields a
// backend honours: tenant (prefix-cache namespace) and priority, from the verified identity.
import { requestIdentity } from '@strata/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { SamplingParams } from '../engine/engine.js';

export interface SamplingBody {
  max_tokens?: number | undefined;
  min_tokens?: number | undefined;
  temperature?: number | undefined;
  top_p?: number | undefined;
  top_k?: number | undefined;
  min_p?: number | undefined;
  repetition_penalty?: number | undefined;
  frequency_penalty?: number | undefined;
  presence_penalty?: number | undefined;
  stop_token_ids?: number[] | undefined;
  seed?: number | undefined;
  ignore_eos?: boolean | undefined;
}

export function samplingParams(body: SamplingBody, logprobs?: number): SamplingParams {
  const p: SamplingParams = {};
  if (body.max_tokens !== undefined) p.maxTokens = body.max_tokens;
  if (body.min_tokens !== undefined) p.minTokens = body.min_tokens;
  if (body.temperature !== undefined) p.temperature = body.temperature;
  if (body.top_p !== undefined) p.topP = body.top_p;
  if (body.top_k !== undefined) p.topK = body.top_k;
  if (body.min_p !== undefined) p.minP = body.min_p;
  if (body.repetition_penalty !== undefined) p.repetitionPenalty = body.repetition_penalty;
  if (body.frequency_penalty !== undefined) p.frequencyPenalty = body.frequency_penalty;
  if (body.presence_penalty !== undefined) p.presencePenalty = body.presence_penalty;
  if (body.stop_token_ids !== undefined) p.stopTokenIds = body.stop_token_ids;
  if (body.seed !== undefined) p.seed = body.seed;
  if (body.ignore_eos !== undefined) p.ignoreEos = body.ignore_eos;
  if (logprobs !== undefined) p.logprobs = logprobs;
  return p;
}

export function stopStrings(stop: string | string[] | null | undefined): string[] {
  if (stop === undefined || stop === null) return [];
  return typeof stop === 'string' ? [stop] : stop;
}

/**
 * Tenant and priority as the edge signed them (identity guard). Without a valid identity, tenant
 * "unverified" (its own prefix-cache namespace) at priority 100: x-strata-tenant,
 * x-strata-priority and the body's priority could come from anyone inside the cluster.
 */
export function platformFields(request: FastifyRequest): { tenant: string; priority: number } {
  const { tenant, priority } = requestIdentity(request);
  return { tenant, priority };
}

/** Aborted when a non-streaming request's connection closes before the reply was sent. */
export function clientGone(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  reply.raw.on('close', () => {
    if (!reply.raw.writableFinished) controller.abort('abort');
  });
  return controller.signal;
}
