import { afterAll, describe, expect, it } from 'vitest';
import { type ChatMessage, ChatTemplate } from '../src/model/chat-template.js';
import { ModelError } from '../src/model/errors.js';
import { loadModelFiles } from '../src/model/model-files.js';
import { modelPath, optionalModel } from './support/models.js';
import { copyTinystories, mergeJson, TempDirs } from './support/temp-model.js';
import { thrown } from './support/thrown.js';

const tiny = optionalModel('tinystories-656k');

const dirs = new TempDirs();
afterAll(() => dirs.removeAll());

// Templates as published with Llama-2-chat and ChatML models; the expected strings come from
// transformers' render_jinja_template (Python jinja2) on the same templates and messages.
const LLAMA2 = String.raw`{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}`;
const CHATML = String.raw`{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`;

const MESSAGES: ChatMessage[] = [
  { role: 'system', content: 'Be brief.' },
  { role: 'user', content: 'Hi there ' },
  { role: 'assistant', content: ' Hello! ' },
  { role: 'user', content: 'Tell me a story.' },
];
const TOKENS = { bosToken: '<s>', eosToken: '</s>' };

describe('ChatTemplate', () => {
  it('renders the Llama 2 chat template with bos_token and eos_token', () => {
    expect(new ChatTemplate(LLAMA2, TOKENS).render(MESSAGES)).toBe(
      '<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi there [/INST] Hello! </s><s>[INST] Tell me a story. [/INST]',
    );
  });

  it('adds the assistant opening only with add_generation_prompt', () => {
    const chatml = new ChatTemplate(CHATML, TOKENS);
    const turns =
      '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there <|im_end|>\n' +
      '<|im_start|>assistant\n Hello! <|im_end|>\n<|im_start|>user\nTell me a story.<|im_end|>\n';
    expect(chatml.render(MESSAGES)).toBe(`${turns}<|im_start|>assistant\n`);
    expect(chatml.render(MESSAGES, { addGenerationPrompt: false })).toBe(turns);
  });

  it('passes extra variables to the template', () => {
    const t = new ChatTemplate('{{ greeting }}, {{ messages | length }} messages', TOKENS);
    expect(t.render(MESSAGES, { variables: { greeting: 'hello' } })).toBe('hello, 4 messages');
  });

  it("turns the template's raise_exception into STRATA_CHAT_TEMPLATE with its message", () => {
    const err = thrown(
      () =>
        new ChatTemplate(LLAMA2, TOKENS).render([
          { role: 'user', content: 'a' },
          { role: 'user', content: 'b' },
        ]),
      ModelError,
    );
    expect(err.code).toBe('STRATA_CHAT_TEMPLATE');
    expect(err.message).toBe(
      'The chat template rejected the messages: Conversation roles must alternate user/assistant/user/assistant/...',
    );
  });

  it('rejects a template that does not parse', () => {
    const err = thrown(() => new ChatTemplate('{% for m in messages %}{{ m.content }}', TOKENS), ModelError);
    expect(err.code).toBe('STRATA_CHAT_TEMPLATE');
    expect(err.message).toMatch(/^The chat template does not parse: /);
  });
});

describe.skipIf(!tiny.path)(`ChatTemplate.fromModelFiles${tiny.skipped}`, () => {
  it('fails with STRATA_NO_CHAT_TEMPLATE for tinystories-656k, which has none', async () => {
    const files = await loadModelFiles(modelPath('tinystories-656k'));
    const err = thrown(() => ChatTemplate.fromModelFiles(files), ModelError);
    expect(err.code).toBe('STRATA_NO_CHAT_TEMPLATE');
    expect(err.field).toBe('chat_template');
    expect(err.message).toBe(
      `The model in ${files.dir} has no chat template (tokenizer_config.json has no chat_template); ` +
        'use /v1/completions with a plain prompt instead',
    );
  });

  it("uses the model's template with the model's BOS and EOS strings", async () => {
    const dir = await copyTinystories(dirs);
    await mergeJson(dir, 'tokenizer_config.json', {
      chat_template:
        "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}{{ eos_token }}{% endfor %}",
    });
    const template = ChatTemplate.fromModelFiles(await loadModelFiles(dir));
    expect(template.render([{ role: 'user', content: 'Tell a story' }])).toBe(
      '<|start_story|>user: Tell a story<|end_story|>',
    );
  });
});
