// The soak's leak report: memory growth over a run's second half, after the warm-up.
import { describe, expect, it } from 'vitest';
import { secondHalfGrowth } from '../src/platform-health.js';

describe('secondHalfGrowth', () => {
  it('measures from the middle sample to the last, per service', () => {
    const series = [0, 1, 2, 3, 4].map((i) => ({
      t_s: i * 30,
      // The edge warms up and stays flat; the router grows 5 MiB a sample all along.
      rss_mib: { edge: i === 0 ? 100 : 150, router: 200 + 5 * i },
    }));
    expect(secondHalfGrowth(series)).toEqual({ edge: 0, router: 10 });
  });

  it('leaves out a service that lost a reading, and runs too short to split', () => {
    const series = [
      { t_s: 0, rss_mib: { edge: 100, router: 200 } },
      { t_s: 30, rss_mib: { edge: 110, router: undefined } },
      { t_s: 60, rss_mib: { edge: 130, router: 210 } },
    ];
    expect(secondHalfGrowth(series)).toEqual({ edge: 20, router: undefined });
    expect(secondHalfGrowth(series.slice(0, 2))).toEqual({});
  });
});
