// STRATA_CHAT_TEMPLATE (vLLM's --chat-template): a Jinja file or the template text itself,
// replacing the model's template; one that does not parse stops the model from loading.
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { configEnv } from '../src/config.js';
import {
  ChatTemplate,
  readChatTemplateSetting,
  withChatTemplateSetting,
} from '../src/model/chat-template.js';
import { ModelError } from '../src/model/errors.js';
import { loadModelFiles } from '../src/model/model-files.js';
import { json, startBackend } from './support/backend.js';
import { optionalModel } from './support/models.js';
import { TempDirs } from './support/temp-model.js';

const dirs = new TempDirs();
const tiny = optionalModel('tinystories-656k');
afterAll(() => dirs.removeAll());

const TEMPLATE =
  "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}" +
  '{% if add_generation_prompt %}assistant:{% endif %}';
const BROKEN = '{% for m in messages %}{{ m.content }}';

async function templateFile(source: string): Promise<string> {
  const file = path.join(await dirs.make('strata-template-'), 'chat.jinja');
  await writeFile(file, source);
  return file;
}

async function settingError(setting: string): Promise<ModelError> {
  const err = await readChatTemplateSetting(setting).then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ModelError);
  expect((err as ModelError).code).toBe('STRATA_CHAT_TEMPLATE');
  return err as ModelError;
}

describe('readChatTemplateSetting', () => {
  it('reads a file', async () => {
    const file = await templateFile(TEMPLATE);
    expect(await readChatTemplateSetting(file)).toEqual({
      source: TEMPLATE,
      origin: `STRATA_CHAT_TEMPLATE file ${file}`,
    });
  });

  it('takes text with template markup as the template itself', async () => {
    expect(await readChatTemplateSetting(TEMPLATE)).toEqual({
      source: TEMPLATE,
      origin: 'STRATA_CHAT_TEMPLATE (inline)',
    });
  });

  it('says a path-like setting that names no file is a path it cannot read', async () => {
    const missing = path.join(await dirs.make(), 'nope.jinja');
    const err = await settingError(missing);
    expect(err.message).toMatch(
      new RegExp(
        `^STRATA_CHAT_TEMPLATE \\("${missing}"\\) looks like a file path, but it cannot be read: .*ENOENT`,
      ),
    );
  });

  it('fails for a template that does not parse, inline or in a file', async () => {
    const inline = await settingError(BROKEN);
    expect(inline.message).toMatch(/^The chat template of STRATA_CHAT_TEMPLATE \(inline\) does not parse: /);
    const file = await templateFile(BROKEN);
    const fromFile = await settingError(file);
    expect(fromFile.message).toMatch(
      new RegExp(`^The chat template of STRATA_CHAT_TEMPLATE file ${file} does not parse: `),
    );
  });

  it.skipIf(!tiny.path)(`replaces the template of a model that has none${tiny.skipped}`, async () => {
    const files = await loadModelFiles(tiny.path as string);
    expect(files.chatTemplate).toBe(null);
    const withTemplate = await withChatTemplateSetting(files, TEMPLATE);
    expect(withTemplate.chatTemplateOrigin).toBe('STRATA_CHAT_TEMPLATE (inline)');
    expect(ChatTemplate.fromModelFiles(withTemplate).render([{ role: 'user', content: 'Hi' }])).toBe(
      '<|start_story|>user: Hi\nassistant:',
    );
  });
});

it('is the setting named STRATA_CHAT_TEMPLATE', () => {
  expect(configEnv.chatTemplate).toBe('STRATA_CHAT_TEMPLATE');
});

describe.skipIf(!tiny.path)(
  `STRATA_CHAT_TEMPLATE on a running backend (tinystories-656k)${tiny.skipped}`,
  () => {
    it('serves chat completions with the template from a file', async () => {
      const backend = await startBackend({
        STRATA_WARMUP: 'false',
        STRATA_CHAT_TEMPLATE: await templateFile(TEMPLATE),
      });
      try {
        expect(backend.config.chatTemplate).toBeDefined();
        const res = await fetch(`${backend.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            messages: [{ role: 'user', content: 'Tell me a story' }],
            max_tokens: 4,
            temperature: 0,
          }),
        });
        expect(res.status).toBe(200);
        const body = await json(res);
        // The prompt is the file's template, rendered.
        const tok = backend.host.get().tokenizer;
        const rendered = '<|start_story|>user: Tell me a story\nassistant:';
        const prompt = await tok.encode(rendered, { addSpecialTokens: false });
        expect(body.usage.prompt_tokens).toBe(prompt.length);
        expect(prompt.length).toBeGreaterThan(8);
        expect(body.choices[0].message.role).toBe('assistant');
      } finally {
        await backend.close();
      }
    });

    it('keeps the model from loading when the template does not parse, saying why', async () => {
      const backend = await startBackend({ STRATA_WARMUP: 'false', STRATA_CHAT_TEMPLATE: BROKEN });
      try {
        const res = await fetch(`${backend.url}/health/ready`);
        expect(res.status).toBe(503);
        const body = await json(res);
        expect(body.checks.model_loaded.ok).toBe(false);
        expect(body.checks.model_loaded.detail).toMatch(
          /^failed to load: The chat template of STRATA_CHAT_TEMPLATE \(inline\) does not parse: /,
        );
      } finally {
        await backend.close();
      }
    });
  },
);
