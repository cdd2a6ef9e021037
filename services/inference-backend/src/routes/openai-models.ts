// GET /v1/models (OpenAI-compatible): the one model this backend serves.
import { type ModelList, modelListSchema } from '@strata/common';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { OpenAiRouteOptions } from './openai-completions.js';
import { openAiErrors, unixSeconds } from './openai-shared.js';

export const modelsRoutes: FastifyPluginAsyncZod<Pick<OpenAiRouteOptions, 'host'>> = async (app, options) => {
  const created = unixSeconds();
  app.get(
    '/v1/models',
    {
      schema: {
        summary: 'The model this backend serves (OpenAI-compatible list)',
        response: { 200: modelListSchema, 503: openAiErrors[503] },
      },
    },
    async (): Promise<ModelList> => {
      const runtime = options.host.get();
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
          },
        ],
      };
    },
  );
};
