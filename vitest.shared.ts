// The vitest settings every package shares: the console report plus a JSON report that
// scripts/summarize-tests.mjs sums into the single "N passed, N failed" line.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    reporters: ['default', ['json', { outputFile: 'reports/vitest.json' }]],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
  },
});
