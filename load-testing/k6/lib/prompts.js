// The prompt mix: short, medium and long prompts, a share of them behind one of a few shared
// prefixes (so prefix caching and prefix affinity have something to find), and session ids.
// Lengths are sized for small models (512-token context): a long prompt is about 200 tokens.
import { config } from './config.js';

const SHARED_PREFIXES = [
  'You are a storyteller for small children. Tell a short, gentle story with a happy ending. ',
  'Write a story about a brave little animal who learns something new about friendship. ',
  'Here is the beginning of a bedtime story. Continue it in simple words. ',
  'Once upon a time, in a small village by a river, there lived a curious child. ',
];

const SENTENCES = [
  'The sun was shining and the birds were singing in the tall green trees.',
  'Lily had a red ball that she loved more than anything else in the world.',
  'One day a little dog came to the park and wanted to play with everyone.',
  'Tom looked at the sky and saw a big cloud that looked like a friendly bear.',
  'Mom said they could bake a cake together if they cleaned up the toys first.',
  'The cat sat by the window and watched the rain fall on the quiet street.',
  'A small boat was floating on the lake, and a duck swam next to it.',
  'Ben found a shiny stone under the bench and showed it to his sister.',
];

const SENTENCES_PER_KIND = { short: 1, medium: 4, long: 10 };

/** Picks a key from [[key, probability], ...] (probabilities sum to 1). */
export function pick(weighted) {
  let r = Math.random();
  for (const [key, p] of weighted) {
    r -= p;
    if (r <= 0) return key;
  }
  return weighted[weighted.length - 1][0];
}

export function makePrompt() {
  const kind = pick(config.prompts);
  const count = SENTENCES_PER_KIND[kind] ?? 1;
  const start = Math.floor(Math.random() * SENTENCES.length);
  const body = [];
  for (let i = 0; i < count; i++) body.push(SENTENCES[(start + i) % SENTENCES.length]);
  const shared = Math.random() < config.sharedPrefixRatio;
  const prefix = shared ? SHARED_PREFIXES[Math.floor(Math.random() * SHARED_PREFIXES.length)] : '';
  return { kind, shared, text: prefix + body.join(' ') };
}

/** A stable session per virtual user, spread over config.sessions ids; undefined when 0. */
export function sessionId(vu) {
  return config.sessions > 0 ? `k6-session-${vu % config.sessions}` : undefined;
}
