// Preloaded into the backend by prompt-stall.mjs (node --import): answers each IPC message with
// the CPU time the main thread has used so far (process.threadCpuUsage, in microseconds), which
// other processes on a busy machine do not inflate as they do wall-clock gaps.
process.on('message', () => {
  process.send?.(process.threadCpuUsage());
});
