// One request's tokens as an async iterator: the engine pushes once per step, the consumer
// pulls at its own pace. Tokens are never dropped; a consumer that stops early calls onCancel.

export class TokenStream<T> implements AsyncIterableIterator<T> {
  private readonly buffered: T[] = [];
  private waiter: { resolve: (r: IteratorResult<T>) => void; reject: (e: unknown) => void } | undefined;
  private ended = false;
  private failure: unknown;

  constructor(private readonly onCancel: () => void) {}

  push(item: T): void {
    if (this.ended) return;
    if (this.waiter) {
      const { resolve } = this.waiter;
      this.waiter = undefined;
      resolve({ value: item, done: false });
    } else {
      this.buffered.push(item);
    }
  }

  end(): void {
    this.settle(undefined);
  }

  fail(error: unknown): void {
    this.settle(error ?? new Error('stream failed'));
  }

  get done(): boolean {
    return this.ended;
  }

  next(): Promise<IteratorResult<T>> {
    const item = this.buffered.shift();
    if (item !== undefined) return Promise.resolve({ value: item, done: false });
    if (this.failure !== undefined) return Promise.reject(this.failure);
    if (this.ended) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject };
    });
  }

  /** The consumer left early (break, throw): the request is cancelled in the engine. */
  return(): Promise<IteratorResult<T>> {
    if (!this.ended) {
      this.ended = true;
      this.buffered.length = 0;
      this.onCancel();
    }
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<T> {
    return this;
  }

  private settle(error: unknown): void {
    if (this.ended) return;
    this.ended = true;
    this.failure = error;
    const waiter = this.waiter;
    this.waiter = undefined;
    if (!waiter) return;
    if (error !== undefined) waiter.reject(error);
    else waiter.resolve({ value: undefined, done: true });
  }
}
