// A whole /v1/generate SSE body -> how it ended and how many token events it carried.
export function sseTerminal(body: string): { terminal: string | undefined; tokens: number } {
  let terminal: string | undefined;
  let tokens = 0;
  for (const block of body.split('\n\n')) {
    const line = block.split('\n').find((l) => l.startsWith('data:'));
    if (!line) continue;
    const event = JSON.parse(line.slice(5)) as { type?: string };
    if (event.type === 'token') tokens++;
    else if (event.type === 'done' || event.type === 'error') terminal = event.type;
  }
  return { terminal, tokens };
}
