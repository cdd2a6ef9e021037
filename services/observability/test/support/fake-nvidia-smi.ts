// Stand-ins for nvidia-smi on machines without NVIDIA hardware (CI): tiny executables that print
// what the real tool prints for the sidecar's query, or fail the ways it fails. They exercise the
// real query loop (spawn, timeout, exit codes, parsing); the CSV shapes are checked against real
// driver output in nvidia-smi.test.ts.
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const FAKE_H100_CSV =
  '0, GPU-5c4d2e2a-8d1b-7f43-a6c1-3b0f7c2e9d11, NVIDIA H100 80GB HBM3, 87, 41, 61440, 20119, 81559, 58, 512.30, 1980, 2619';

/** A directory holding an executable `nvidia-smi` running `body` (sh); put it first on PATH. */
export function fakeNvidiaSmiDir(body: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'strata-fake-nvidia-smi-'));
  const file = join(dir, 'nvidia-smi');
  writeFileSync(file, `#!/bin/sh\n${body}\n`);
  chmodSync(file, 0o755);
  return dir;
}

/**
 * Prints `csv` for the query, as a one-GPU node would; once a file named `fail` exists beside
 * it, fails like a node that lost its driver (exit 9, the reason on stdout).
 */
export function printingNvidiaSmi(csv = FAKE_H100_CSV): string {
  return fakeNvidiaSmiDir(
    [
      'if [ -e "$(dirname "$0")/fail" ]; then',
      "  echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; exit 9",
      'fi',
      `case "$1" in --query-gpu=*) printf '%s\\n' '${csv}' ;; *) exit 2 ;; esac`,
    ].join('\n'),
  );
}
