// The PNG of a load run: TTFT and throughput over time, drawn by scripts/plot.py with matplotlib
// (installed from PyPI into .toolchain/plot-venv by scripts/ensure-plot.sh on first use).
import { execFileSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const scripts = join(dirname(fileURLToPath(import.meta.url)), '..', 'scripts');

export function plotRun(samplesCsv: string, png: string, title: string): void {
  const python = execFileSync('bash', [join(scripts, 'ensure-plot.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  }).trim();
  execFileSync(python, [join(scripts, 'plot.py'), samplesCsv, png, title], { stdio: 'inherit' });
}
