// Errors of the model-files side of the backend (reading a model directory, tokenizing, chat
// templates, converting checkpoints): StrataErrors with codes from the common catalogue, plus
// the file and field at fault.
import { StrataError } from '@strata/common';

export type ModelErrorCode =
  /** A model directory file is missing, unreadable, not JSON, or has a field of the wrong shape. */
  | 'STRATA_MODEL_FILES'
  /** A chat request reached a model whose tokenizer_config.json carries no chat template. */
  | 'STRATA_NO_CHAT_TEMPLATE'
  /** The chat template failed to parse or raised while rendering (e.g. roles must alternate). */
  | 'STRATA_CHAT_TEMPLATE'
  /** A checkpoint handed to a converter is not what it claims to be. */
  | 'STRATA_CONVERT';

export class ModelError extends StrataError {
  declare readonly code: ModelErrorCode;
  /** The file at fault, when there is one. */
  readonly file: string | undefined;
  /** The JSON path (or protobuf/header field) at fault inside `file`, when there is one. */
  readonly field: string | undefined;

  constructor(
    code: ModelErrorCode,
    message: string,
    options: { file?: string; field?: string; cause?: unknown } = {},
  ) {
    super(code, message, options.cause === undefined ? {} : { cause: options.cause });
    this.name = 'ModelError';
    this.file = options.file;
    this.field = options.field;
  }
}
