// Just enough of the Prometheus text format to read a few engine totals from a backend's
// /metrics: the sum of every sample of one metric name, across its label sets.

/** Sum of the samples of `name`; undefined when the text has none. */
export function sumSamples(text: string, name: string): number | undefined {
  let sum: number | undefined;
  for (const line of text.split('\n')) {
    let rest: string;
    if (line.startsWith(`${name}{`)) {
      // Label values may hold spaces and braces inside quotes; the value follows the last '}'.
      rest = line.slice(line.lastIndexOf('}') + 1);
    } else if (line.startsWith(`${name} `)) {
      rest = line.slice(name.length);
    } else continue;
    const value = Number(rest.trim().split(/\s+/)[0]);
    if (Number.isFinite(value)) sum = (sum ?? 0) + value;
  }
  return sum;
}
