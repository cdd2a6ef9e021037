// The native engine raises errors with codes written in C++; every one must be a code of the
// common catalogue, so the HTTP layer maps it to a status and type without a special case.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ERROR_CATALOGUE } from '@strata/common';
import { describe, expect, it } from 'vitest';

const native = join(import.meta.dirname, '..', 'native');
const sources = [
  join(native, 'engine', 'core', 'include', 'strata', 'errors.h'),
  join(native, 'engine', 'model', 'include', 'strata', 'model_error.h'),
  join(native, 'engine', 'cuda', 'include', 'strata', 'cuda_kernels.h'),
  ...readdirSync(join(native, 'addon'))
    .filter((f) => f.endsWith('.cpp'))
    .map((f) => join(native, 'addon', f)),
];

describe('native error codes', () => {
  it('are all in the common catalogue', () => {
    const codes = new Set(
      sources.flatMap((file) =>
        [...readFileSync(file, 'utf8').matchAll(/"(STRATA_[A-Z_]+)"/g)].map((m) => m[1]),
      ),
    );
    expect(codes.size).toBeGreaterThan(10);
    expect([...codes].filter((code) => code !== undefined && !Object.hasOwn(ERROR_CATALOGUE, code))).toEqual(
      [],
    );
  });
});
