// Chat messages -> prompt text with the model's own Jinja chat template, as transformers'
// apply_chat_template does: the template sees `messages`, `bos_token`, `eos_token` and
// `add_generation_prompt`; raise_exception() in a template becomes a request error. The rendered
// text already holds whatever special tokens the template writes, so it is encoded with
// addSpecialTokens: false.

import { readFile } from 'node:fs/promises';
import { Template } from '@huggingface/jinja';
import { ModelError } from './errors.js';
import type { ModelFiles } from './model-files.js';

export interface ChatMessage {
  role: string;
  content: string;
  /** An assistant turn's tool calls, as transformers' templates read them (arguments: an object). */
  tool_calls?: { type: 'function'; function: { name: string; arguments: unknown } }[];
  /** A tool turn: the call it answers. */
  tool_call_id?: string;
}

export interface RenderOptions {
  /** End with the opening of an assistant turn, so the model writes the reply (default true). */
  addGenerationPrompt?: boolean;
  /** More template variables (tools, documents, ...), as apply_chat_template's extra kwargs. */
  variables?: Record<string, unknown>;
}

export class ChatTemplate {
  readonly #template: Template;
  readonly #bosToken: string;
  readonly #eosToken: string;

  /** Throws ModelError STRATA_CHAT_TEMPLATE when `source` is not a template @huggingface/jinja can parse. */
  constructor(source: string, tokens: { bosToken: string | null; eosToken: string | null }) {
    try {
      this.#template = new Template(source);
    } catch (err) {
      throw new ModelError('STRATA_CHAT_TEMPLATE', `The chat template does not parse: ${errorText(err)}`, {
        cause: err,
      });
    }
    this.#bosToken = tokens.bosToken ?? '';
    this.#eosToken = tokens.eosToken ?? '';
  }

  /**
   * The model's template; throws ModelError STRATA_NO_CHAT_TEMPLATE when it has none. `model`
   * names the model in that message (default: its directory); the service passes the served
   * name, so that clients never see the server's paths.
   */
  static fromModelFiles(files: ModelFiles, model = `in ${files.path}`): ChatTemplate {
    if (files.chatTemplate === null) {
      const gguf = files.format === 'gguf';
      throw new ModelError(
        'STRATA_NO_CHAT_TEMPLATE',
        `The model ${model} has no chat template ` +
          `(${gguf ? 'its GGUF file has no tokenizer.chat_template' : 'tokenizer_config.json has no chat_template'}); ` +
          'use /v1/completions with a plain prompt instead',
        gguf
          ? { file: files.path, field: 'tokenizer.chat_template' }
          : { file: `${files.dir}/tokenizer_config.json`, field: 'chat_template' },
      );
    }
    return new ChatTemplate(files.chatTemplate, { bosToken: files.bosToken, eosToken: files.eosToken });
  }

  /** Throws ModelError STRATA_CHAT_TEMPLATE with the template's own message when rendering fails. */
  render(messages: readonly ChatMessage[], options: RenderOptions = {}): string {
    try {
      return this.#template.render({
        ...options.variables,
        messages,
        bos_token: this.#bosToken,
        eos_token: this.#eosToken,
        add_generation_prompt: options.addGenerationPrompt ?? true,
      });
    } catch (err) {
      throw new ModelError(
        'STRATA_CHAT_TEMPLATE',
        `The chat template rejected the messages: ${errorText(err)}`,
        {
          cause: err,
        },
      );
    }
  }
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Characters a Jinja template has and a file path (almost) never does. */
const TEMPLATE_MARKUP = /[{}\n]/;

/**
 * The template a chat-template setting (STRATA_CHAT_TEMPLATE) stands for, as vLLM reads its
 * --chat-template: the contents of the file it names, else the setting itself as template text.
 * A setting that names no readable file and holds no template markup ({, } or a newline) is taken
 * for a path that is wrong. The template must parse. Throws ModelError STRATA_CHAT_TEMPLATE.
 */
export async function readChatTemplateSetting(
  setting: string,
  name = 'STRATA_CHAT_TEMPLATE',
): Promise<{ source: string; origin: string }> {
  let template: { source: string; origin: string };
  try {
    template = { source: await readFile(setting, 'utf8'), origin: `${name} file ${setting}` };
  } catch (err) {
    if (!TEMPLATE_MARKUP.test(setting)) {
      throw new ModelError(
        'STRATA_CHAT_TEMPLATE',
        `${name} (${JSON.stringify(setting)}) looks like a file path, but it cannot be read: ${errorText(err)}`,
        { file: setting, cause: err },
      );
    }
    template = { source: setting, origin: `${name} (inline)` };
  }
  try {
    new Template(template.source);
  } catch (err) {
    throw new ModelError(
      'STRATA_CHAT_TEMPLATE',
      `The chat template of ${template.origin} does not parse: ${errorText(err)}`,
      { cause: err },
    );
  }
  return template;
}

/** `files` with the chat template replaced by the one a setting names (see readChatTemplateSetting). */
export async function withChatTemplateSetting(files: ModelFiles, setting: string): Promise<ModelFiles> {
  const { source, origin } = await readChatTemplateSetting(setting);
  return { ...files, chatTemplate: source, chatTemplateOrigin: origin };
}
