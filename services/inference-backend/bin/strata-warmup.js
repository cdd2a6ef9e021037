#!/usr/bin/env node
// The strata-warmup command: runs ../dist/cli/warmup.js once built (scripts/lib/run-built.mjs).
import { runBuilt } from '../../../scripts/lib/run-built.mjs';

await runBuilt(import.meta.url, '../dist/cli/warmup.js', '@strata/inference-backend');
