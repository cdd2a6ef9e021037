// The package's test suite: the native engine's C++ tests (ctest, in the addon's build dir,
// JUnit report) and the TypeScript tests (vitest). Both always run; either failing fails.
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
mkdirSync(join(root, 'reports'), { recursive: true });
const run = (cmd, args) => spawnSync(cmd, args, { cwd: root, stdio: 'inherit' }).status ?? 1;

const ctest = run('ctest', [
  '--test-dir',
  join(root, 'build'),
  '--output-on-failure',
  // ctest keeps only 1 KB of a passing test's output by default, which cuts off the executable's
  // last line, "N passed, N failed, N skipped", that the test summary counts cases from.
  '--test-output-size-passed',
  '1048576',
  '--test-output-size-failed',
  '1048576',
  '--output-junit',
  join(root, 'reports', 'ctest.xml'),
]);
// pnpm puts the workspace's node_modules/.bin (vitest) on PATH for package scripts.
const vitest = run('vitest', ['run']);
process.exit(ctest === 0 && vitest === 0 ? 0 : 1);
