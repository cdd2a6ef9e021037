// Sums every suite's report into one table and the final line "N passed, N failed".
// Reports: vitest JSON (reports/vitest.json) and ctest JUnit (reports/ctest.xml) per package.
// A runner that left no report counts as a failed suite: a crash is not a pass.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const packages = [
  ...readdirSync(join(root, 'services')).map((d) => join('services', d)),
  'load-testing',
  'helm',
  'infrastructure',
].filter((dir) => existsSync(join(root, dir, 'package.json')));

function vitestCounts(file) {
  const r = JSON.parse(readFileSync(file, 'utf8'));
  // A file that failed to load has no tests but counts as failed.
  const brokenFiles = r.testResults.filter(
    (t) => t.status === 'failed' && t.assertionResults.length === 0,
  ).length;
  return {
    passed: r.numPassedTests,
    failed: r.numFailedTests + brokenFiles,
    skipped: r.numPendingTests + r.numTodoTests,
  };
}

// ctest's JUnit lists one testcase per executable; our C++ test executables print their own
// "N passed, N failed" (native/engine/tests/check.h), so cases are counted from that line.
function junitCounts(file) {
  const xml = readFileSync(file, 'utf8');
  const total = { passed: 0, failed: 0, skipped: 0 };
  for (const [, attrs, body] of xml.matchAll(/<testcase([^>]*)>([\s\S]*?)<\/testcase>/g)) {
    const status = /status="([a-z]+)"/.exec(attrs)?.[1];
    const own = /(\d+) passed, (\d+) failed(?:, (\d+) skipped)?/.exec(body);
    if (own) {
      total.passed += Number(own[1]);
      total.skipped += Number(own[3] ?? 0);
      // An executable that crashed after printing its line still failed.
      total.failed += Math.max(Number(own[2]), status === 'fail' ? 1 : 0);
    } else if (status === 'notrun' || status === 'disabled') total.skipped += 1;
    else if (status === 'fail') total.failed += 1;
    else total.passed += 1;
  }
  return total;
}

const rows = [];
for (const dir of packages) {
  const pkg = JSON.parse(readFileSync(join(root, dir, 'package.json'), 'utf8'));
  if (!pkg.scripts?.test) continue;
  // Each runner a package has must leave its report: a missing one is a suite that crashed.
  const expected = [
    ['vitest', 'vitest.config.ts', join(root, dir, 'reports', 'vitest.json'), vitestCounts],
    ['ctest', 'CMakeLists.txt', join(root, dir, 'reports', 'ctest.xml'), junitCounts],
  ].filter(([, marker]) => existsSync(join(root, dir, marker)));
  const reports = [];
  for (const [kind, , file, count] of expected) {
    if (existsSync(file)) reports.push([kind, file, count]);
    else
      rows.push({
        suite: `${pkg.name} ${kind} (no report: the suite did not run to the end)`,
        passed: 0,
        failed: 1,
        skipped: 0,
      });
  }
  for (const [kind, file, count] of reports) rows.push({ suite: `${pkg.name} ${kind}`, ...count(file) });
}

const total = rows.reduce(
  (t, r) => ({ passed: t.passed + r.passed, failed: t.failed + r.failed, skipped: t.skipped + r.skipped }),
  {
    passed: 0,
    failed: 0,
    skipped: 0,
  },
);
const width = Math.max(...rows.map((r) => r.suite.length));
console.log(`\n${'suite'.padEnd(width)}  passed  failed  skipped`);
for (const r of rows) {
  console.log(
    `${r.suite.padEnd(width)}  ${String(r.passed).padStart(6)}  ${String(r.failed).padStart(6)}  ${String(r.skipped).padStart(7)}`,
  );
}
console.log(
  `${total.passed} passed, ${total.failed} failed${total.skipped ? `, ${total.skipped} skipped` : ''}`,
);
process.exit(total.failed > 0 || total.passed === 0 ? 1 : 0);
