/** Prompt number i, e.g. "Lily saw a ball and a ball. One day". */
export function storyPrompt(i: number): string;
