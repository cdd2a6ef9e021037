// GET /v1/models (OpenAI-compatible): the one model this backend serves. Beside OpenAI's fields
// (and vLLM's root and max_model_len), as vLLM and llama.cpp's server add their own, each card
// says how the model is stored: format ('gguf' or 'huggingface'), quantization (a GGUF file's
// type, e.g. 'Q4_1'; a Hugging Face model's dtype from config.json) and the model's own name.
import { modelCardSchema } from '@strata/common';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { OpenAiRouteOptions } from './openai-completions.js';
import { openAiErrors, unixSeconds } from './openai-shared.js';

export const backendModelCardSchema = modelCardSchema.extend({
  /** How the weights are stored: a GGUF file or a Hugging Face directory. */
  format: z.enum(['gguf', 'huggingface']),
  /** 'Q4_1', 'Q8_0', 'F16' ... for GGUF; config.json's dtype ('bfloat16', ...) for Hugging Face; null when unknown. */
  quantization: z.string().nullable(),
  /** The name the model files give the model (GGUF general.name), or null. */
  display_name: z.string().nullable(),
});
export const backendModelListSchema = z.object({
  object: z.literal('list'),
  data: z.array(backendModelCardSchema),
});
export type BackendModelList = z.output<typeof backendModelListSchema>;

export const modelsRoutes: FastifyPluginAsyncZod<Pick<OpenAiRouteOptions, 'host'>> = async (app, options) => {
  const created = unixSeconds();
  app.get(
    '/v1/models',
    {
      schema: {
        summary: 'The model this backend serves (OpenAI-compatible list)',
        response: { 200: backendModelListSchema, 401: openAiErrors[401], 503: openAiErrors[503] },
      },
    },
    async (): Promise<BackendModelList> => {
      const runtime = options.host.get();
      const { files } = runtime;
      return {
        object: 'list',
        data: [
          {
            id: runtime.modelName,
            object: 'model',
            created,
            owned_by: 'strata',
            root: runtime.modelName,
            max_model_len: runtime.maxModelLen,
            format: files.format,
            quantization: files.quantization,
            display_name: files.displayName,
          },
        ],
      };
    },
  );
};
