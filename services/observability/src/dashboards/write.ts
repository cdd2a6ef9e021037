// Writes dashboards/<name>.json from specs.ts: `pnpm run dashboards` after changing a spec.
// The unit tests fail when a committed file differs from what this writes.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { dashboardFiles } from './index.js';

const dir = process.argv[2] ?? 'dashboards';
for (const [file, text] of dashboardFiles()) writeFileSync(join(dir, file), text);
