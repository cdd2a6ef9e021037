// Distinct short TinyStories-style prompts by index, shared by the HTTP latency benchmark and
// the stress test: 16 names x 20 things give 320 different openings before any repeats.
const NAMES = 'Lily Tom Sue Max Anna Ben Mia Sam Zoe Tim Jack Amy Leo Eva Dan Kim'.split(' ');
const THINGS =
  'ball cat tree boat cake dog bird car hat box sun fish toy park bed cup frog kite duck shoe'.split(' ');

/** Prompt number i, e.g. "Lily saw a ball and a ball. One day". */
export function storyPrompt(i) {
  const name = NAMES[i % NAMES.length];
  const thing = THINGS[Math.floor(i / NAMES.length) % THINGS.length];
  const other = THINGS[(i * 7) % THINGS.length];
  return `${name} saw a ${thing} and a ${other}. One day`;
}
