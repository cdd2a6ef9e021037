// Chat messages -> prompt text with the model's own Jinja chat template, as transformers'
// apply_chat_template does: the template sees `messages`, `bos_token`, `eos_token` and
// `add_generation_prompt`; raise_exception() in a template becomes a request error. The rendered
// text already holds whatever special tokens the template writes, so it is encoded with
// addSpecialTokens: false.

import { Template } from '@huggingface/jinja';
import { ModelError } from './errors.js';
import type { ModelFiles } from './model-files.js';

export interface ChatMessage {
  role: string;
  content: string;
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
  static fromModelFiles(files: ModelFiles, model = `in ${files.dir}`): ChatTemplate {
    if (files.chatTemplate === null) {
      throw new ModelError(
        'STRATA_NO_CHAT_TEMPLATE',
        `The model ${model} has no chat template (tokenizer_config.json has no chat_template); ` +
          'use /v1/completions with a plain prompt instead',
        { file: `${files.dir}/tokenizer_config.json`, field: 'chat_template' },
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
