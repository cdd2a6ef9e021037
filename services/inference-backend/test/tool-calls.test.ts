// The tool-call parser on text as a model streams it, piece by piece: plain text passes, text
// that might begin a call is held back, calls come out whole when their closing tag arrives,
// and nothing the model wrote is lost (a bad or unclosed call stays content).
import { describe, expect, it } from 'vitest';
import {
  ToolCallParser,
  type ToolFormat,
  toolFormatOf,
  toolGrammar,
  toolPlan,
} from '../src/routes/tool-calls.js';

const tools = [
  { type: 'function' as const, function: { name: 'get_weather', parameters: { type: 'object' } } },
  { type: 'function' as const, function: { name: 'get_time' } },
];

/** Feeds `text` in pieces of `size` characters; returns the content and the calls. */
function run(text: string, size: number, format: ToolFormat = 'hermes') {
  const parser = new ToolCallParser(tools, format);
  let content = '';
  const calls: { name: string; arguments: string }[] = [];
  for (let i = 0; i < text.length; i += size) {
    const step = parser.push(text.slice(i, i + size));
    content += step.content;
    calls.push(...step.calls.map((c) => c.function));
  }
  const last = parser.finish();
  content += last.content;
  calls.push(...last.calls.map((c) => c.function));
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

describe('the formats of other templates', () => {
  it('recognises the call format a template teaches', () => {
    expect(toolFormatOf(null)).toBe('hermes');
    expect(toolFormatOf('{% for m in messages %}{{ m.content }}{% endfor %}')).toBe('hermes'); // knows no tools
    expect(
      toolFormatOf('{% if tools %}<tools>{{ tools }}</tools> use <tool_call></tool_call>{% endif %}'),
    ).toBe('hermes');
    expect(toolFormatOf('{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}{% endif %}[TOOL_CALLS]')).toBe(
      'mistral',
    );
    expect(
      toolFormatOf(
        '{% if tools %}Respond in the format {"name": function name, "parameters": ...}{% endif %}',
      ),
    ).toBe('llama3-json');
  });

  it.each([1, 4, 1000])("finds Mistral's call list after [TOOL_CALLS] (pieces of %i)", (size) => {
    const text =
      'Checking. [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_time", "arguments": {}}]';
    expect(run(text, size, 'mistral')).toEqual({
      content: 'Checking. ',
      calls: [
        { name: 'get_weather', arguments: '{"city":"Oslo"}' },
        { name: 'get_time', arguments: '{}' },
      ],
    });
    expect(run('[TOOL_CALLS][{"name": "nope", "arguments": {}}]', size, 'mistral').calls).toEqual([]);
  });

  it.each([1, 5, 1000])(
    "reads Llama 3's JSON answer as one call, and text as text (pieces of %i)",
    (size) => {
      expect(
        run('  <|python_tag|>{"name": "get_time", "parameters": {"tz": "UTC"}}', size, 'llama3-json'),
      ).toEqual({
        content: '',
        calls: [{ name: 'get_time', arguments: '{"tz":"UTC"}' }],
      });
      expect(run('It is sunny {not a call}', size, 'llama3-json')).toEqual({
        content: 'It is sunny {not a call}',
        calls: [],
      });
      const cut = '{"name": "get_time", "param';
      expect(run(cut, size, 'llama3-json')).toEqual({ content: cut, calls: [] });
    },
  );

  it('constrains each format with its own grammar', () => {
    const mistral = toolPlan({ tools, tool_choice: 'required' }, 'mistral');
    expect(mistral && toolGrammar(mistral)?.data).toMatch(/^start: "\[TOOL_CALLS\]" %json \{"type":"array"/);
    const llama = toolPlan({ tools, tool_choice: 'required' }, 'llama3-json');
    expect(llama?.parallel).toBe(false);
    const grammar = llama && toolGrammar(llama)?.data;
    expect(grammar).toMatch(/^start: %json \{"anyOf":/);
    expect(grammar).toContain('"required":["name","parameters"]');
  });
});
