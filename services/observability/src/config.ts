import { baseServiceEnv, baseServiceSchema, configFields, type EnvMap } from '@strata/common';
import type { z } from 'zod';

export const configSchema = baseServiceSchema.extend({ port: configFields.port(9400) });
export type Config = z.output<typeof configSchema>;
export const configEnv: EnvMap = { ...baseServiceEnv };
/** Environment variable naming an optional YAML config file. */
export const CONFIG_FILE_ENV = 'STRATA_OBSERVABILITY_CONFIG';
