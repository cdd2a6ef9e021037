#!/usr/bin/env node
// The strata-fetch-model command: runs ../dist/cli/fetch-model.js once built (scripts/lib/run-built.mjs).
import { runBuilt } from '../../../scripts/lib/run-built.mjs';

await runBuilt(import.meta.url, '../dist/cli/fetch-model.js', '@strata/inference-backend');
