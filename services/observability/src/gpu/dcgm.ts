// Reads GPU telemetry from NVIDIA's dcgm-exporter on this node (its Prometheus /metrics) and
// keeps only the GPUs allocated to this pod: with its Kubernetes mapping on, dcgm-exporter
// labels each GPU's series with the pod, namespace and container that hold the GPU. The
// series map onto the same GpuSample the nvidia-smi query gives, so the collector and the
// diagnosis do not care which source answered.
import type { GpuSample } from './nvidia-smi.js';

/** DCGM field → the GpuSample field it fills. */
const FIELD_MAP = {
  DCGM_FI_DEV_GPU_UTIL: 'utilPercent',
  DCGM_FI_DEV_MEM_COPY_UTIL: 'memUtilPercent',
  DCGM_FI_DEV_FB_USED: 'memUsedMiB',
  DCGM_FI_DEV_FB_FREE: 'memFreeMiB',
  DCGM_FI_DEV_FB_TOTAL: 'memTotalMiB',
  DCGM_FI_DEV_GPU_TEMP: 'temperatureC',
  DCGM_FI_DEV_POWER_USAGE: 'powerW',
  DCGM_FI_DEV_SM_CLOCK: 'smClockMHz',
  DCGM_FI_DEV_MEM_CLOCK: 'memClockMHz',
  DCGM_FI_PROF_SM_ACTIVE: 'smActiveRatio',
  DCGM_FI_PROF_DRAM_ACTIVE: 'dramActiveRatio',
} as const satisfies Record<string, keyof GpuSample>;
type DcgmField = keyof typeof FIELD_MAP;
/** Read too, for the framebuffer total when DCGM_FI_DEV_FB_TOTAL is not among the counters. */
const FB_RESERVED = 'DCGM_FI_DEV_FB_RESERVED';
/** Every DCGM field the sidecar reads (the chart's counters list is checked against it). */
export const DCGM_FIELDS_READ: readonly string[] = [...Object.keys(FIELD_MAP), FB_RESERVED];

// DCGM marks a value it could not read with sentinels at and above DCGM_INT32_BLANK
// (0x7ffffff0); the int64 and fp64 blanks are larger still. Current exporters drop such series,
// older ones printed them (e.g. 9223372036854775794 for "not supported"). No mapped field
// comes near this range, so anything in it is "no reading", never a value.
const DCGM_BLANK_MIN = 0x7ffffff0;

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export class DcgmError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DcgmError';
  }
}

/**
 * The samples of the wanted metric names in a Prometheus text exposition. Label values may
 * hold escaped quotes, backslashes and newlines; a line that does not parse is an error.
 */
export function parseExposition(text: string, wanted: (name: string) => boolean): Sample[] {
  const samples: Sample[] = [];
  for (const rawLine of text.split('\n')) {
    const line = rawLine.trim();
    if (line === '' || line.startsWith('#')) continue;
    const nameEnd = line.search(/[{\s]/);
    const name = nameEnd === -1 ? line : line.slice(0, nameEnd);
    if (!wanted(name)) continue;
    const labels: Record<string, string> = {};
    let i = nameEnd;
    if (line[i] === '{') {
      i = parseLabels(line, i + 1, labels);
    }
    const valueText = line.slice(i).trim().split(/\s+/)[0] ?? '';
    const value = parseValue(valueText);
    if (value === undefined) {
      throw new DcgmError(`unparsable sample value in ${JSON.stringify(line.slice(0, 200))}`);
    }
    samples.push({ name, labels, value });
  }
  return samples;
}

function parseValue(text: string): number | undefined {
  if (text === '+Inf') return Number.POSITIVE_INFINITY;
  if (text === '-Inf') return Number.NEGATIVE_INFINITY;
  if (text === 'NaN') return Number.NaN;
  const value = text === '' ? Number.NaN : Number(text);
  return Number.isNaN(value) ? undefined : value;
}

// Parses `a="x",b="y"}` from position i; returns the position after the closing brace.
function parseLabels(line: string, start: number, labels: Record<string, string>): number {
  let i = start;
  const bad = () => new DcgmError(`unparsable labels in ${JSON.stringify(line.slice(0, 200))}`);
  for (;;) {
    while (line[i] === ' ' || line[i] === ',') i++;
    if (line[i] === '}') return i + 1;
    const eq = line.indexOf('=', i);
    if (eq === -1 || line[eq + 1] !== '"') throw bad();
    const key = line.slice(i, eq).trim();
    let value = '';
    let j = eq + 2;
    for (; j < line.length && line[j] !== '"'; j++) {
      if (line[j] === '\\') {
        j++;
        value += line[j] === 'n' ? '\n' : (line[j] ?? '');
      } else value += line[j];
    }
    if (j >= line.length || key === '') throw bad();
    labels[key] = value;
    i = j + 1;
  }
}

export interface DcgmPod {
  name: string;
  /** Unset: the pod name alone must match. */
  namespace: string | undefined;
}

const isWanted = (name: string) => name in FIELD_MAP || name === FB_RESERVED;
const reading = (value: number) =>
  Number.isFinite(value) && Math.abs(value) < DCGM_BLANK_MIN ? value : undefined;

/**
 * This pod's GPUs from a dcgm-exporter exposition, one GpuSample per GPU (per GPU instance
 * with MIG), ordered by GPU index. Throws DcgmError when the text has no DCGM series at all or
 * none for this pod: then the collector falls back to nvidia-smi.
 */
export function podGpusFromExposition(text: string, pod: DcgmPod): GpuSample[] {
  const samples = parseExposition(text, isWanted);
  if (samples.length === 0) {
    throw new DcgmError('no DCGM_FI_* series in the answer (is this a dcgm-exporter /metrics?)');
  }
  const byGpu = new Map<string, { sample: GpuSample; reserved?: number }>();
  for (const s of samples) {
    const l = s.labels;
    // dcgm-exporter's --use-old-namespace writes pod_name / pod_namespace instead.
    const podName = l.pod ?? l.pod_name;
    const podNamespace = l.namespace ?? l.pod_namespace;
    if (podName !== pod.name || (pod.namespace !== undefined && podNamespace !== pod.namespace)) continue;
    const uuid = l.UUID ?? l.uuid ?? '';
    const key = `${l.gpu}/${uuid}/${l.GPU_I_ID ?? ''}`;
    let entry = byGpu.get(key);
    if (!entry) {
      const index = Number(l.gpu);
      if (!Number.isInteger(index) || index < 0) {
        throw new DcgmError(`series ${s.name} has no GPU index: gpu=${JSON.stringify(l.gpu)}`);
      }
      entry = { sample: emptySample(index, uuid, l.modelName ?? '') };
      byGpu.set(key, entry);
    }
    const value = reading(s.value);
    if (s.name === FB_RESERVED) entry.reserved = value;
    else entry.sample[FIELD_MAP[s.name as DcgmField]] = value;
  }
  if (byGpu.size === 0) {
    const who = pod.namespace === undefined ? pod.name : `${pod.namespace}/${pod.name}`;
    throw new DcgmError(
      `no series for pod ${who} (is the exporter's Kubernetes mapping on, and is it this node's exporter?)`,
    );
  }
  const gpus: GpuSample[] = [];
  for (const { sample, reserved } of byGpu.values()) {
    // The default counters have no FB_TOTAL: used + free (+ reserved) is the board's memory.
    if (
      sample.memTotalMiB === undefined &&
      sample.memUsedMiB !== undefined &&
      sample.memFreeMiB !== undefined
    ) {
      sample.memTotalMiB = sample.memUsedMiB + sample.memFreeMiB + (reserved ?? 0);
    }
    gpus.push(sample);
  }
  return gpus.sort((a, b) => a.index - b.index);
}

function emptySample(index: number, uuid: string, name: string): GpuSample {
  return {
    index,
    uuid,
    name,
    utilPercent: undefined,
    memUtilPercent: undefined,
    memUsedMiB: undefined,
    memFreeMiB: undefined,
    memTotalMiB: undefined,
    temperatureC: undefined,
    powerW: undefined,
    smClockMHz: undefined,
    memClockMHz: undefined,
    smActiveRatio: undefined,
    dramActiveRatio: undefined,
  };
}

/** One GET of dcgm-exporter's /metrics, reduced to this pod's GPUs; throws DcgmError. */
export async function readDcgm(url: string, pod: DcgmPod, timeoutMs: number): Promise<GpuSample[]> {
  let response: Response;
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  } catch (err) {
    const e = err as Error & { cause?: { message?: string } };
    const why = e.name === 'TimeoutError' ? `no answer within ${timeoutMs} ms` : e.message;
    throw new DcgmError(`GET ${url}: ${why}${e.cause?.message ? ` (${e.cause.message})` : ''}`);
  }
  if (!response.ok) {
    await response.body?.cancel();
    throw new DcgmError(`GET ${url} answered ${response.status}`);
  }
  return podGpusFromExposition(await response.text(), pod);
}
