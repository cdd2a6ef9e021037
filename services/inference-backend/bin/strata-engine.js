#!/usr/bin/env node
// The strata-engine command: runs ../dist/cli/strata-engine.js once built (scripts/lib/run-built.mjs).
import { runBuilt } from '../../../scripts/lib/run-built.mjs';

await runBuilt(import.meta.url, '../dist/cli/strata-engine.js', '@strata/inference-backend');
