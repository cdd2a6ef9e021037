// What a package's committed bin file (package.json "bin") does: run the built entry point, or
// say how to build it. The bin files exist before any build, so a fresh clone's pnpm install
// links them without "Failed to create bin" warnings.
//   await runBuilt(import.meta.url, '../dist/cli.js', '@strata/load-testing');
import { existsSync } from 'node:fs';
import { basename } from 'node:path';
import { fileURLToPath } from 'node:url';

export async function runBuilt(binUrl, relativeEntry, packageName) {
  const entryUrl = new URL(relativeEntry, binUrl);
  const entry = fileURLToPath(entryUrl);
  if (!existsSync(entry)) {
    const command = basename(fileURLToPath(binUrl), '.js');
    process.stderr.write(
      `${command}: ${entry} is missing: build first (scripts/strata setup, or pnpm --filter ${packageName} run build)\n`,
    );
    process.exit(1);
  }
  // The entry runs its command only when it is the program (process.argv[1]).
  process.argv[1] = entry;
  await import(entryUrl.href);
}
