import { describe, expect, it } from 'vitest';
import { jsonUsageTap, sseUsageTap, usageTokens } from '../src/proxy/usage-tap.js';

const ev = (data: unknown) => `data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;

// Feeds `text` in pieces of `size` characters; returns what reached the client.
function run(tap: ReturnType<typeof sseUsageTap>, text: string, size: number): string {
  let out = '';
  for (let i = 0; i < text.length; i += size)
    out += tap.push(Buffer.from(text.slice(i, i + size)))?.toString() ?? '';
  out += tap.flush()?.toString() ?? '';
  return out;
}

describe('usageTokens', () => {
  it('reads either API', () => {
    expect(usageTokens({ input_tokens: 5, output_tokens: 30 })).toBe(35);
    expect(usageTokens({ prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 })).toBe(8);
    expect(usageTokens({ prompt_tokens: 5, completion_tokens: 3 })).toBe(8);
    expect(usageTokens(null)).toBeUndefined();
    expect(usageTokens({ output_tokens: -1 })).toBeUndefined();
  });
});

describe('SSE usage tap', () => {
  const generate =
    ev({ type: 'token', token: ' is', id: 318, index: 0 }) +
    ': heartbeat\n\n' +
    ev({ type: 'token', token: ' a', id: 2, index: 1 }) +
    ev({ type: 'done', finish_reason: 'length', usage: { input_tokens: 5, output_tokens: 2 } });

  it.each([1, 7, 64, 4096])(
    'passes a /v1/generate stream unchanged in %i-byte pieces and reads its usage',
    (size) => {
      const tap = sseUsageTap({ dropUsageChunk: false });
      expect(run(tap, generate, size)).toBe(generate);
      expect(tap.tokens()).toBe(7);
    },
  );

  it('passes whole-event chunks through as the same buffers', () => {
    const tap = sseUsageTap({ dropUsageChunk: false });
    const chunk = Buffer.from(ev({ type: 'token', token: 'x', id: 1, index: 0 }));
    expect(tap.push(chunk)).toBe(chunk);
  });

  const chunk = (content: string) =>
    ev({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content } }] });
  const usage = ev({
    id: 'c',
    object: 'chat.completion.chunk',
    choices: [],
    usage: { prompt_tokens: 4, completion_tokens: 2, total_tokens: 6 },
  });
  const openai = chunk('Hi') + chunk(' there') + usage + ev('[DONE]');

  it.each([1, 13, 4096])('removes the usage chunk the edge asked for (%i-byte pieces)', (size) => {
    const tap = sseUsageTap({ dropUsageChunk: true });
    expect(run(tap, openai, size)).toBe(chunk('Hi') + chunk(' there') + ev('[DONE]'));
    expect(tap.tokens()).toBe(6);
  });

  it('keeps the usage chunk the client asked for', () => {
    const tap = sseUsageTap({ dropUsageChunk: false });
    expect(run(tap, openai, 5)).toBe(openai);
    expect(tap.tokens()).toBe(6);
  });

  it('counts token events when the stream broke off before its usage', () => {
    const tap = sseUsageTap({ dropUsageChunk: false });
    const cut = generate.slice(0, generate.indexOf('data: {"type":"done"'));
    expect(run(tap, `${cut}data: {"type":"tok`, 9)).toBe(`${cut}data: {"type":"tok`);
    expect(tap.tokens()).toBe(2);
    const failed = sseUsageTap({ dropUsageChunk: false });
    run(failed, ev({ type: 'error', error: { code: 'STRATA_ENGINE_ERROR' } }), 100);
    expect(failed.tokens()).toBe(0);
  });
});

describe('JSON usage tap', () => {
  it('reads usage from the whole body, in any pieces', () => {
    const tap = jsonUsageTap();
    const body = JSON.stringify({ text: 'x', usage: { input_tokens: 3, output_tokens: 4 } });
    for (let i = 0; i < body.length; i += 5) tap.push(Buffer.from(body.slice(i, i + 5)));
    expect(tap.tokens()).toBe(7);
    const notJson = jsonUsageTap();
    notJson.push(Buffer.from('<html>'));
    expect(notJson.tokens()).toBe(0);
  });
});
