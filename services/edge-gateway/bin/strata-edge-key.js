#!/usr/bin/env node
// The strata-edge-key command: runs ../dist/cli/edge-key.js once built (scripts/lib/run-built.mjs).
import { runBuilt } from '../../../scripts/lib/run-built.mjs';

await runBuilt(import.meta.url, '../dist/cli/edge-key.js', '@strata/edge-gateway');
