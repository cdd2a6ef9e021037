// Sums every suite's report into one table and the final line "N passed, N failed, N skipped".
// Reports: vitest JSON (reports/vitest.json) and ctest JUnit (reports/ctest.xml) per package.
//   node scripts/summarize-tests.mjs [root]    (root: the checkout, by default this one)
// Honest by construction:
// - a runner that left no report counts as a failed suite: a crash is not a pass;
// - a test file that failed outside its tests (import, beforeAll/afterAll) counts as failed, by
//   name, and the tests its set-up kept from running count as failed, not skipped;
// - every skip says why, one line per reason: vitest tests carry it in their title as
//   "(skipped: …)" (@strata/common/testing), C++ cases print "skip <case>: <reason>".
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';

const root = resolve(process.argv[2] ?? new URL('..', import.meta.url).pathname);
const packages = [
  ...(existsSync(join(root, 'services'))
    ? readdirSync(join(root, 'services')).map((d) => join('services', d))
    : []),
  'load-testing',
  'helm',
  'infrastructure',
].filter((dir) => existsSync(join(root, dir, 'package.json')));

const NO_REASON = 'no reason given';
/** The reason in a title's "(skipped: …)", else NO_REASON. */
const skipReason = (title) => /\(skipped: (.+)\)/.exec(title)?.[1] ?? NO_REASON;

function emptyCounts() {
  return { passed: 0, failed: 0, skipped: 0, failures: [], skips: [] };
}

function vitestCounts(file, pkgDir) {
  const r = JSON.parse(readFileSync(file, 'utf8'));
  const counts = emptyCounts();
  for (const t of r.testResults) {
    const name = relative(pkgDir, t.name);
    const tests = t.assertionResults;
    const ownFailures = tests.filter((a) => a.status === 'failed');
    for (const a of ownFailures) counts.failures.push(`${name} › ${a.fullName}`);
    counts.failed += ownFailures.length;
    counts.passed += tests.filter((a) => a.status === 'passed').length;
    const notRun = tests.filter((a) => a.status !== 'passed' && a.status !== 'failed');
    // A file that failed with none of its tests failing broke outside them: at load, or in a
    // beforeAll/afterAll hook (vitest then marks the tests the hook guarded as skipped).
    const setUpFailed = t.status === 'failed' && ownFailures.length === 0;
    const kept = setUpFailed ? notRun.filter((a) => skipReason(a.fullName) === NO_REASON) : [];
    if (setUpFailed) {
      const why = (t.message ?? '').split('\n')[0] || 'a set-up or tear-down hook failed';
      counts.failures.push(
        `${name}: failed outside its tests (${why})${kept.length ? `; ${kept.length} tests did not run` : ''}`,
      );
      counts.failed += Math.max(kept.length, 1);
    }
    for (const a of notRun) {
      if (kept.includes(a)) continue;
      counts.skipped += 1;
      counts.skips.push({ reason: skipReason(a.fullName), test: `${name} › ${a.fullName}` });
    }
  }
  return counts;
}

const unxml = (text) =>
  text.replace(
    /&(lt|gt|quot|apos|amp);/g,
    (_, e) => ({ lt: '<', gt: '>', quot: '"', apos: "'", amp: '&' })[e],
  );

// ctest's JUnit lists one testcase per executable; our C++ test executables print their own
// "N passed, N failed, N skipped" (native/engine/tests/check.h), so cases are counted from that line.
function junitCounts(file) {
  const xml = readFileSync(file, 'utf8');
  const counts = emptyCounts();
  for (const [, attrs, raw] of xml.matchAll(/<testcase([^>]*)>([\s\S]*?)<\/testcase>/g)) {
    const body = unxml(raw.replace(/<\/?system-out>/g, '\n'));
    const status = /status="([a-z]+)"/.exec(attrs)?.[1];
    const name = /name="([^"]*)"/.exec(attrs)?.[1] ?? '?';
    const own = /(\d+) passed, (\d+) failed(?:, (\d+) skipped)?/.exec(body);
    for (const [, test, reason] of body.matchAll(/^skip (.+?): (.+)$/gm)) {
      counts.skips.push({ reason: reason.trim(), test: `${name} › ${test}` });
    }
    if (own) {
      counts.passed += Number(own[1]);
      counts.skipped += Number(own[3] ?? 0);
      // An executable that crashed after printing its line still failed.
      const failed = Math.max(Number(own[2]), status === 'fail' ? 1 : 0);
      counts.failed += failed;
      if (failed)
        counts.failures.push(
          `${name}: ${own[2]} cases failed${status === 'fail' ? ' (exit status non-zero)' : ''}`,
        );
    } else if (status === 'notrun' || status === 'disabled') {
      counts.skipped += 1;
      if (!/^skip /m.test(body)) counts.skips.push({ reason: NO_REASON, test: name });
    } else if (status === 'fail') {
      counts.failed += 1;
      counts.failures.push(`${name}: failed before printing its summary line`);
    } else counts.passed += 1;
  }
  return counts;
}

const rows = [];
for (const dir of packages) {
  const pkgDir = join(root, dir);
  const pkg = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8'));
  if (!pkg.scripts?.test) continue;
  // Each runner a package has must leave its report: a missing one is a suite that crashed.
  const expected = [
    ['vitest', 'vitest.config.ts', join(pkgDir, 'reports', 'vitest.json'), vitestCounts],
    ['ctest', 'CMakeLists.txt', join(pkgDir, 'reports', 'ctest.xml'), junitCounts],
  ].filter(([, marker]) => existsSync(join(pkgDir, marker)));
  for (const [kind, , file, count] of expected) {
    const suite = `${pkg.name} ${kind}`;
    if (existsSync(file)) rows.push({ suite, ...count(file, pkgDir) });
    else
      rows.push({
        suite,
        ...emptyCounts(),
        failed: 1,
        failures: ['no report: the suite did not run to the end (see its output above)'],
      });
  }
}

const total = { passed: 0, failed: 0, skipped: 0 };
for (const r of rows) for (const key of Object.keys(total)) total[key] += r[key];
const width = Math.max(5, ...rows.map((r) => r.suite.length));
console.log(`\n${'suite'.padEnd(width)}  passed  failed  skipped`);
for (const r of rows) {
  console.log(
    `${r.suite.padEnd(width)}  ${String(r.passed).padStart(6)}  ${String(r.failed).padStart(6)}  ${String(r.skipped).padStart(7)}`,
  );
}

const failures = rows.flatMap((r) => r.failures.map((f) => `${r.suite}: ${f}`));
if (failures.length) {
  console.log('\nfailed:');
  for (const f of failures) console.log(`  ${f}`);
}

// One line per reason; a skip without one is named test by test, so it can be given one.
const byReason = new Map();
for (const s of rows.flatMap((r) => r.skips)) {
  if (s.reason === NO_REASON) byReason.set(`${NO_REASON}: ${s.test}`, 1);
  else byReason.set(s.reason, (byReason.get(s.reason) ?? 0) + 1);
}
if (byReason.size) {
  console.log('\nskipped, by reason:');
  for (const [reason, n] of byReason) console.log(`  ${String(n).padStart(4)}  ${reason}`);
}

console.log(
  `${total.passed} passed, ${total.failed} failed${total.skipped ? `, ${total.skipped} skipped` : ''}`,
);
process.exit(total.failed > 0 || total.passed === 0 ? 1 : 0);
