// Real inference-backend processes (the built service, CPU engine, tinystories-656k) for the
// router's end-to-end tests. Model paths come from STRATA_MODELS_DIR only.
import { type ServiceProcess, serviceEntry, startServiceProcess, testModelDir } from '@strata/common/testing';

export type BackendProcess = ServiceProcess;
export { waitReady } from '@strata/common/testing';

const entry = serviceEntry('@strata/inference-backend', import.meta.url);

/** Starts a backend on a free port and resolves once it is listening (not yet ready). */
export function startBackendProcess(name: string, env: Record<string, string> = {}): Promise<BackendProcess> {
  return startServiceProcess(name, entry, {
    env: {
      STRATA_MODEL_DIR: testModelDir(),
      STRATA_KV_CACHE_BLOCKS: '256',
      STRATA_ENGINE_THREADS: '1',
      STRATA_WARMUP: 'false',
      ...env,
    },
  });
}
