#!/usr/bin/env node
// The strata-platform command: runs ../dist/cli.js once built (scripts/lib/run-built.mjs).
import { runBuilt } from '../../scripts/lib/run-built.mjs';

await runBuilt(import.meta.url, '../dist/cli.js', '@strata/load-testing');
