// Server-sent events as a client reads them, for the benchmarks' Node clients (http-latency.mjs,
// scripts/device/service-load.mjs): text chunks in, each complete `data:` frame's JSON out.
// Dependency-free: the service bundle's Node runs it on a machine without the workspace.

/** Returns a function to call with each text chunk; it calls onEvent(json) per complete frame. */
export function sseJsonFrames(onEvent) {
  let buffer = '';
  return (chunk) => {
    buffer += chunk;
    let end = buffer.indexOf('\n\n');
    while (end >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      end = buffer.indexOf('\n\n');
      if (frame.startsWith('data: ')) onEvent(JSON.parse(frame.slice(6)));
    }
  };
}
