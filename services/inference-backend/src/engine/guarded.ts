// An async generator's `finally` runs only if its body started: closing it with return()
// before the first next() skips it. Streams that hold resources (an engine request, an
// admission slot) are wrapped so their cleanup also runs in that case.

export function guarded<T>(gen: AsyncGenerator<T>, cleanupIfUnstarted: () => void): AsyncIterableIterator<T> {
  let started = false;
  const settleUnstarted = () => {
    if (started) return;
    started = true;
    cleanupIfUnstarted();
  };
  const iterator: AsyncIterableIterator<T> = {
    next: () => {
      started = true;
      return gen.next();
    },
    return: (value?: unknown) => {
      settleUnstarted();
      return gen.return(value as T);
    },
    throw: (error?: unknown) => {
      settleUnstarted();
      return gen.throw(error);
    },
    [Symbol.asyncIterator]: () => iterator,
  };
  return iterator;
}
