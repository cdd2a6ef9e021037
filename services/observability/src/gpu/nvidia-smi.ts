// Parses `nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits`: one line per
// GPU, fields joined by ", ", numbers without units. Fields a GPU or driver cannot report come
// back as "[N/A]", "[Not Supported]" and the like; they parse to undefined, never to 0.

/** The fields queried, in order; each numeric one maps to a DCGM-exporter name in metrics.ts. */
export const QUERY_FIELDS = [
  'index',
  'uuid',
  'name',
  'utilization.gpu',
  'utilization.memory',
  'memory.used',
  'memory.free',
  'memory.total',
  'temperature.gpu',
  'power.draw',
  'clocks.sm',
  'clocks.mem',
] as const;

export interface GpuSample {
  index: number;
  uuid: string;
  name: string;
  /** Percent 0..100 of the last sample period a kernel was running. */
  utilPercent: number | undefined;
  /** Percent 0..100 of the period device memory was read or written. */
  memUtilPercent: number | undefined;
  /** Framebuffer memory, MiB. */
  memUsedMiB: number | undefined;
  memFreeMiB: number | undefined;
  memTotalMiB: number | undefined;
  /** Core temperature, degrees C. */
  temperatureC: number | undefined;
  /** Board power draw, W. */
  powerW: number | undefined;
  /** Current clocks, MHz. */
  smClockMHz: number | undefined;
  memClockMHz: number | undefined;
  /** DCGM profiling only (DCGM_FI_PROF_SM_ACTIVE / DRAM_ACTIVE), 0..1; nvidia-smi has neither. */
  smActiveRatio: number | undefined;
  dramActiveRatio: number | undefined;
}

export class GpuQueryParseError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'GpuQueryParseError';
  }
}

function numberOrUndefined(text: string): number | undefined {
  const trimmed = text.trim();
  if (trimmed === '' || trimmed.startsWith('[') || /^n\/?a$/i.test(trimmed)) return undefined;
  const value = Number(trimmed);
  return Number.isFinite(value) ? value : undefined;
}

/** One GpuSample per non-empty line; throws GpuQueryParseError on a line of the wrong shape. */
export function parseGpuQuery(stdout: string): GpuSample[] {
  const samples: GpuSample[] = [];
  for (const rawLine of stdout.split(/\r?\n/)) {
    const line = rawLine.trim();
    if (line === '') continue;
    let fields = line.split(',').map((f) => f.trim());
    // A model name containing a comma arrives split: glue the surplus back into the name.
    const surplus = fields.length - QUERY_FIELDS.length;
    if (surplus > 0)
      fields = [...fields.slice(0, 2), fields.slice(2, 3 + surplus).join(', '), ...fields.slice(3 + surplus)];
    if (fields.length !== QUERY_FIELDS.length) {
      throw new GpuQueryParseError(
        `expected ${QUERY_FIELDS.length} fields per line, got ${fields.length}: ${JSON.stringify(line)}`,
      );
    }
    const [index, uuid, name, ...numbers] = fields as [string, string, string, ...string[]];
    const gpuIndex = Number(index);
    if (!Number.isInteger(gpuIndex) || gpuIndex < 0) {
      throw new GpuQueryParseError(`GPU index is not a number: ${JSON.stringify(line)}`);
    }
    const n = numbers.map(numberOrUndefined);
    samples.push({
      index: gpuIndex,
      uuid,
      name,
      utilPercent: n[0],
      memUtilPercent: n[1],
      memUsedMiB: n[2],
      memFreeMiB: n[3],
      memTotalMiB: n[4],
      temperatureC: n[5],
      powerW: n[6],
      smClockMHz: n[7],
      memClockMHz: n[8],
      smActiveRatio: undefined,
      dramActiveRatio: undefined,
    });
  }
  return samples;
}
