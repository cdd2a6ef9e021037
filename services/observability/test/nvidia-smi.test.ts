import { describe, expect, it } from 'vitest';
import { GpuQueryParseError, parseGpuQuery, QUERY_FIELDS } from '../src/gpu/nvidia-smi.js';

// Output shapes of `nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits` as
// drivers print them: ", " separators, model names with spaces, "[N/A]" for fields a board
// cannot report (power on some boards, everything numeric on a MIG-enabled GPU).
const H100_IDLE =
  '0, GPU-5c4d2e2a-8d1b-7f43-a6c1-3b0f7c2e9d11, NVIDIA H100 80GB HBM3, 0, 0, 1, 80562, 81559, 33, 71.42, 345, 2619\n';
const TWO_GPUS = [
  '0, GPU-11111111-2222-3333-4444-555555555555, NVIDIA A100-SXM4-40GB, 97, 61, 38110, 2250, 40960, 64, 301.55, 1410, 1215',
  '1, GPU-66666666-7777-8888-9999-000000000000, NVIDIA A100-SXM4-40GB, 12, 3, 4, 40356, 40960, 41, 61.02, 1410, 1215',
  '',
].join('\n');
const WITH_NA =
  '0, GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, Tesla T4, 0, 0, 0, 14912, 15360, 30, [N/A], 300, 5000\n';
const MIG =
  '0, GPU-abcdef01-2345-6789-abcd-ef0123456789, NVIDIA A100-PCIE-40GB, [N/A], [N/A], 12, 40000, 40960, 35, 45.10, [Not Supported], 1215\r\n';

describe('parseGpuQuery', () => {
  it('reads one H100 line into numbers with their units', () => {
    expect(parseGpuQuery(H100_IDLE)).toEqual([
      {
        index: 0,
        uuid: 'GPU-5c4d2e2a-8d1b-7f43-a6c1-3b0f7c2e9d11',
        name: 'NVIDIA H100 80GB HBM3',
        utilPercent: 0,
        memUtilPercent: 0,
        memUsedMiB: 1,
        memFreeMiB: 80562,
        memTotalMiB: 81559,
        temperatureC: 33,
        powerW: 71.42,
        smClockMHz: 345,
        memClockMHz: 2619,
      },
    ]);
  });

  it('reads one GPU per line and skips the trailing empty line', () => {
    const gpus = parseGpuQuery(TWO_GPUS);
    expect(gpus.map((g) => [g.index, g.utilPercent, g.memUsedMiB, g.powerW])).toEqual([
      [0, 97, 38110, 301.55],
      [1, 12, 4, 61.02],
    ]);
  });

  it('turns [N/A] and [Not Supported] into undefined, never 0', () => {
    expect(parseGpuQuery(WITH_NA)[0]?.powerW).toBeUndefined();
    const [mig] = parseGpuQuery(MIG);
    expect(mig?.utilPercent).toBeUndefined();
    expect(mig?.memUtilPercent).toBeUndefined();
    expect(mig?.smClockMHz).toBeUndefined();
    expect(mig?.memUsedMiB).toBe(12);
    expect(mig?.memClockMHz).toBe(1215);
  });

  it('keeps a model name that contains a comma whole', () => {
    const line = '0, GPU-x, Some GPU, Rev 2, 5, 1, 10, 20, 30, 40, 50.5, 1000, 2000';
    const [gpu] = parseGpuQuery(line);
    expect(gpu?.name).toBe('Some GPU, Rev 2');
    expect(gpu?.utilPercent).toBe(5);
    expect(gpu?.memClockMHz).toBe(2000);
  });

  it('answers nothing for no GPUs and rejects lines of the wrong shape', () => {
    expect(parseGpuQuery('')).toEqual([]);
    expect(QUERY_FIELDS).toHaveLength(12);
    expect(() => parseGpuQuery('0, GPU-x, H100, 1, 2')).toThrow(GpuQueryParseError);
    expect(() =>
      parseGpuQuery('NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'),
    ).toThrow(/expected 12 fields/);
    expect(() => parseGpuQuery('x, GPU-x, H100, 1, 2, 3, 4, 5, 6, 7, 8, 9')).toThrow(/index is not a number/);
  });
});
