#!/usr/bin/env node
// strata-edge-key: makes API keys for the tenants file, which stores only their hashes.
//   strata-edge-key new            a fresh random key and its "sha256:…" hash
//   strata-edge-key hash <key>     the hash of an existing key (or the key on stdin)
//   strata-edge-key identity [id]  a fresh STRATA_IDENTITY_KEYS entry, "id:base64secret"
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { hashKey } from '../auth/authenticate.js';

const [command, arg] = process.argv.slice(2);
if (command === 'new') {
  const key = `sk-strata-${randomBytes(24).toString('base64url')}`;
  process.stdout.write(`key:  ${key}\nhash: ${hashKey(key)}\n`);
} else if (command === 'hash') {
  const key = (arg ?? readFileSync(0, 'utf8')).trim();
  if (key === '') {
    process.stderr.write('strata-edge-key hash: give the key as an argument or on stdin\n');
    process.exit(2);
  }
  process.stdout.write(`${hashKey(key)}\n`);
} else if (command === 'identity') {
  const id = arg ?? `k${new Date().toISOString().slice(0, 10).replaceAll('-', '')}`;
  if (!/^[A-Za-z0-9_-]{1,32}$/.test(id)) {
    process.stderr.write('strata-edge-key identity: the id is 1-32 of A-Z a-z 0-9 _ -\n');
    process.exit(2);
  }
  process.stdout.write(`${id}:${randomBytes(32).toString('base64')}\n`);
} else {
  process.stderr.write(
    'usage: strata-edge-key new | strata-edge-key hash <key> | strata-edge-key identity [id]\n',
  );
  process.exit(2);
}
