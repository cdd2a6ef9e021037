import { expect } from 'vitest';

/** The error `fn` throws, checked to be an instance of `type`; fails the test if nothing is thrown. */
export function thrown<E extends Error>(fn: () => unknown, type: abstract new (...args: never[]) => E): E {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(type);
    return err as E;
  }
  throw new Error(`expected a ${type.name}, nothing was thrown`);
}

/** The error `promise` rejects with, checked to be an instance of `type`; fails the test if it resolves. */
export async function rejected<E extends Error>(
  promise: Promise<unknown>,
  type: abstract new (...args: never[]) => E,
): Promise<E> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(type);
  return err as E;
}
