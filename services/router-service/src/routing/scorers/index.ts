// The scorers the picker runs, in this order (the order of the decision log's scores). A new
// scorer is a file in this folder and an entry here; rules weigh it as `policy.weights.<name>`.
import { kvUsageScorer } from './kv-usage.js';
import { prefixScorer } from './prefix.js';
import { queueScorer } from './queue.js';
import { sessionScorer } from './session.js';

export const SCORERS = [queueScorer, kvUsageScorer, prefixScorer, sessionScorer] as const;

export type ScorerName = (typeof SCORERS)[number]['name'];
