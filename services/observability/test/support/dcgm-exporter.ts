// What dcgm-exporter 4.2.3-4.1.3 answers on /metrics on a two-GPU node where two backend pods
// hold one GPU each. Written by hand (no GPU or exporter runs here) in that version's exact
// format (internal/pkg/rendermetrics/render_metrics.go): HELP/TYPE per field as in its
// default-counters.csv, then per GPU the labels gpu, UUID, pci_bus_id, device, modelName,
// Hostname (the node, from NODE_NAME), the DCGM_FI_DRIVER_VERSION label field, then the
// attributes sorted by name: the pod mapping's container/namespace/pod and XID's
// err_code/err_msg; integer fields printed with %d, floating ones with %f. The fields are
// most of the chart's counters list (helm/strata/templates/dcgm-exporter/_counters.tpl) with
// profiling on.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export const THIS_POD = { name: 'strata-backend-llama-3-8b-6c9f7d8b5-x2x7q', namespace: 'strata' };
export const OTHER_POD = { name: 'strata-backend-mistral-7b-58d4c9f7b-k8m2p', namespace: 'strata' };

const NODE = 'ip-10-0-12-34.us-west-2.compute.internal';
const GPUS = [
  {
    gpu: '0',
    uuid: 'GPU-1b4c7e2d-8a3f-4e61-9c0d-5f2a7b8e9c10',
    bus: '00000000:53:00.0',
    pod: THIS_POD,
    values: {
      DCGM_FI_DEV_SM_CLOCK: '1980',
      DCGM_FI_DEV_MEM_CLOCK: '2619',
      DCGM_FI_DEV_MEMORY_TEMP: '71',
      DCGM_FI_DEV_GPU_TEMP: '67',
      DCGM_FI_DEV_POWER_USAGE: '612.500000',
      DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION: '48210931442',
      DCGM_FI_DEV_PCIE_REPLAY_COUNTER: '0',
      DCGM_FI_DEV_GPU_UTIL: '97',
      DCGM_FI_DEV_MEM_COPY_UTIL: '61',
      DCGM_FI_DEV_ENC_UTIL: '0',
      DCGM_FI_DEV_DEC_UTIL: '0',
      DCGM_FI_DEV_XID_ERRORS: '0',
      DCGM_FI_DEV_FB_FREE: '9845',
      DCGM_FI_DEV_FB_USED: '71234',
      DCGM_FI_PROF_GR_ENGINE_ACTIVE: '0.958213',
      DCGM_FI_PROF_SM_ACTIVE: '0.812345',
      DCGM_FI_PROF_PIPE_TENSOR_ACTIVE: '0.402117',
      DCGM_FI_PROF_DRAM_ACTIVE: '0.734512',
    },
  },
  {
    gpu: '1',
    uuid: 'GPU-9e2f4a61-3c7b-4d08-a15e-6b9c0d2e4f37',
    bus: '00000000:64:00.0',
    pod: OTHER_POD,
    values: {
      DCGM_FI_DEV_SM_CLOCK: '1755',
      DCGM_FI_DEV_MEM_CLOCK: '2619',
      DCGM_FI_DEV_MEMORY_TEMP: '45',
      DCGM_FI_DEV_GPU_TEMP: '41',
      DCGM_FI_DEV_POWER_USAGE: '143.200000',
      DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION: '21873309120',
      DCGM_FI_DEV_PCIE_REPLAY_COUNTER: '0',
      DCGM_FI_DEV_GPU_UTIL: '12',
      DCGM_FI_DEV_MEM_COPY_UTIL: '3',
      DCGM_FI_DEV_ENC_UTIL: '0',
      DCGM_FI_DEV_DEC_UTIL: '0',
      DCGM_FI_DEV_XID_ERRORS: '0',
      DCGM_FI_DEV_FB_FREE: '65737',
      DCGM_FI_DEV_FB_USED: '15342',
      DCGM_FI_PROF_GR_ENGINE_ACTIVE: '0.131907',
      DCGM_FI_PROF_SM_ACTIVE: '0.081234',
      DCGM_FI_PROF_PIPE_TENSOR_ACTIVE: '0.030512',
      DCGM_FI_PROF_DRAM_ACTIVE: '0.021456',
    },
  },
];

const HELP: [string, string, string][] = [
  ['DCGM_FI_DEV_SM_CLOCK', 'gauge', 'SM clock frequency (in MHz).'],
  ['DCGM_FI_DEV_MEM_CLOCK', 'gauge', 'Memory clock frequency (in MHz).'],
  ['DCGM_FI_DEV_MEMORY_TEMP', 'gauge', 'Memory temperature (in C).'],
  ['DCGM_FI_DEV_GPU_TEMP', 'gauge', 'GPU temperature (in C).'],
  ['DCGM_FI_DEV_POWER_USAGE', 'gauge', 'Power draw (in W).'],
  ['DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION', 'counter', 'Total energy consumption since boot (in mJ).'],
  ['DCGM_FI_DEV_PCIE_REPLAY_COUNTER', 'counter', 'Total number of PCIe retries.'],
  ['DCGM_FI_DEV_GPU_UTIL', 'gauge', 'GPU utilization (in %).'],
  ['DCGM_FI_DEV_MEM_COPY_UTIL', 'gauge', 'Memory utilization (in %).'],
  ['DCGM_FI_DEV_ENC_UTIL', 'gauge', 'Encoder utilization (in %).'],
  ['DCGM_FI_DEV_DEC_UTIL', 'gauge', 'Decoder utilization (in %).'],
  ['DCGM_FI_DEV_XID_ERRORS', 'gauge', 'Value of the last XID error encountered.'],
  ['DCGM_FI_DEV_FB_FREE', 'gauge', 'Framebuffer memory free (in MiB).'],
  ['DCGM_FI_DEV_FB_USED', 'gauge', 'Framebuffer memory used (in MiB).'],
  ['DCGM_FI_PROF_GR_ENGINE_ACTIVE', 'gauge', 'Ratio of time the graphics engine is active.'],
  ['DCGM_FI_PROF_SM_ACTIVE', 'gauge', 'The ratio of cycles an SM has at least 1 warp assigned.'],
  ['DCGM_FI_PROF_PIPE_TENSOR_ACTIVE', 'gauge', 'Ratio of cycles the tensor (HMMA) pipe is active.'],
  [
    'DCGM_FI_PROF_DRAM_ACTIVE',
    'gauge',
    'Ratio of cycles the device memory interface is active sending or receiving data.',
  ],
];

/** The exporter's answer; `only` drops every field not listed (e.g. profiling off). */
export function dcgmExposition(only?: string[]): string {
  const lines: string[] = [];
  for (const [field, type, help] of HELP) {
    if (only && !only.includes(field)) continue;
    lines.push(`# HELP ${field} ${help}`, `# TYPE ${field} ${type}`);
    for (const g of GPUS) {
      const xid = field === 'DCGM_FI_DEV_XID_ERRORS' ? 'err_code="0",err_msg="No Error",' : '';
      lines.push(
        `${field}{gpu="${g.gpu}",UUID="${g.uuid}",pci_bus_id="${g.bus}",device="nvidia${g.gpu}",` +
          `modelName="NVIDIA H100 80GB HBM3",Hostname="${NODE}",DCGM_FI_DRIVER_VERSION="570.133.20",` +
          `container="backend",${xid}namespace="${g.pod.namespace}",pod="${g.pod.name}"} ` +
          g.values[field as keyof typeof g.values],
      );
    }
  }
  return `${lines.join('\n')}\n`;
}

export interface DcgmExporterLike {
  server: Server;
  /** http://127.0.0.1:<port>/metrics */
  url: string;
  /** GET /metrics requests answered so far. */
  hits: () => number;
  close: () => Promise<void>;
}

/** A real HTTP server on port 0 answering /metrics with `body()` (and 404 elsewhere). */
export async function dcgmExporterLike(
  body: () => string = () => dcgmExposition(),
): Promise<DcgmExporterLike> {
  let hits = 0;
  const server = createServer((req, res) => {
    if (req.url === '/metrics') {
      hits++;
      res.setHeader('content-type', 'text/plain; version=0.0.4');
      res.end(body());
    } else res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    server,
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`,
    hits: () => hits,
    close: async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}
