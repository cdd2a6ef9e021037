// A polling loop that never overlaps itself: the next run is scheduled when the previous one
// has settled, so a slow source (a hung nvidia-smi, a stalled backend) cannot pile up calls.
// Timers are unref'd: a sidecar with nothing else to do exits on its own signals.

export interface PollLoop {
  stop(): void;
}

export function startPollLoop(run: () => Promise<void>, intervalMs: number): PollLoop {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const tick = async () => {
    try {
      await run();
    } finally {
      if (!stopped) {
        timer = setTimeout(tick, intervalMs);
        timer.unref();
      }
    }
  };
  void tick();
  return {
    stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
    },
  };
}
