// What tests do with an engine's token stream: read it to the end, and keep the tokens.
import type { GeneratedToken } from '../../src/engine/engine.js';

export async function collect(stream: AsyncIterable<GeneratedToken>): Promise<GeneratedToken[]> {
  const events: GeneratedToken[] = [];
  for await (const event of stream) events.push(event);
  return events;
}

export const tokensOf = (events: GeneratedToken[]) =>
  events.flatMap((e) => (e.token === undefined ? [] : [e.token]));
