// The tool-call parser on text as a model streams it, piece by piece: plain text passes, text
// that might begin a call is held back, calls come out whole when their closing tag arrives,
// and nothing the model wrote is lost (a bad or unclosed call stays content).
import { describe, expect, it } from 'vitest';
import { ToolCallParser, toolGrammar, toolPlan } from '../src/routes/tool-calls.js';

const tools = [
  { type: 'function' as const, function: { name: 'get_weather', parameters: { type: 'object' } } },
  { type: 'function' as const, function: { name: 'get_time' } },
];

/** Feeds `text` in pieces of `size` characters; returns the content, the calls, and the pieces' outputs. */
function run(text: string, size: number) {
  const parser = new ToolCallParser(tools);
  let content = '';
  const calls: { name: string; arguments: string }[] = [];
  for (let i = 0; i < text.length; i += size) {
    const step = parser.push(text.slice(i, i + size));
    content += step.content;
    calls.push(...step.calls.map((c) => c.function));
  }
  content += parser.finish().content;
  return { content, calls };
}

describe('ToolCallParser', () => {
  const call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';

  it.each([1, 3, 7, 1000])('finds the same calls and text whatever the piece size (%i)', (size) => {
    const text = `Let me check.\n${call}\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>`;
    expect(run(text, size)).toEqual({
      content: 'Let me check.\n',
      calls: [
        { name: 'get_weather', arguments: '{"city":"Paris"}' },
        { name: 'get_time', arguments: '{}' },
      ],
    });
  });

  it('passes text with a < that begins no call', () => {
    expect(run('a < b and <tool a>', 2)).toEqual({ content: 'a < b and <tool a>', calls: [] });
  });

  it('keeps a block that is not JSON, or names no tool, as content', () => {
    const bad = '<tool_call>\nnot json\n</tool_call>';
    const unknown = '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>';
    expect(run(bad, 4)).toEqual({ content: bad, calls: [] });
    expect(run(unknown, 4)).toEqual({ content: unknown, calls: [] });
  });

  it('releases an unclosed call (cut by max_tokens) as content at the end', () => {
    const cut = '<tool_call>\n{"name": "get_weather", "argu';
    expect(run(cut, 5)).toEqual({ content: cut, calls: [] });
  });

  it('gives each call its own id', () => {
    const parser = new ToolCallParser(tools);
    const step = parser.push(`${call}\n${call}`);
    expect(step.calls).toHaveLength(2);
    expect(step.calls[0]?.id).not.toBe(step.calls[1]?.id);
  });
});

describe('toolPlan and toolGrammar', () => {
  it("is none without tools, auto with them, and constrains only 'required' and named calls", () => {
    expect(toolPlan({})).toBeUndefined();
    expect(toolPlan({ tools, tool_choice: 'none' })).toBeUndefined();
    const auto = toolPlan({ tools });
    expect(auto?.mode).toBe('auto');
    expect(auto && toolGrammar(auto)).toBeUndefined();
    const required = toolPlan({ tools, tool_choice: 'required', parallel_tool_calls: false });
    const grammar = required && toolGrammar(required);
    expect(grammar?.kind).toBe('lark');
    expect(grammar?.data).toMatch(/^start: call\ncall: "<tool_call>\\n" %json \{"anyOf":/);
    const named = toolPlan({ tools, tool_choice: { type: 'function', function: { name: 'get_time' } } });
    expect(named && toolGrammar(named)?.data).toContain('"const":"get_time"');
    expect(named && toolGrammar(named)?.data).not.toContain('get_weather');
  });
});
