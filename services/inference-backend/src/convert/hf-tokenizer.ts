// A SentencePiece BPE model -> the Hugging Face files that reproduce it: tokenizer.json (a BPE model
// with byte fallback, as transformers' LlamaConverter builds) and tokenizer_config.json.
//
// Merges come from the piece scores, as LlamaConverter's SentencePieceExtractor derives them: every
// split of a piece into two pieces of the vocabulary is a merge ranked by the piece's score (higher
// first), splits of one piece in vocabulary-id order. SentencePiece BPE merges the adjacent pair whose
// union scores highest, so the ranks reproduce its choices.
//
// One step beyond LlamaConverter: when the model asks for remove_extra_whitespaces (llama2.c's
// tok512 does; Llama 2's does not), the normalizer also drops leading/trailing spaces and collapses
// runs of spaces, as SentencePiece does, so "a  b" encodes the same in both.

import { ModelError } from '../model/errors.js';
import { ModelType, PieceType, type SentencePieceModel } from './sentencepiece-model.js';

export interface HfTokenizerFiles {
  /** tokenizer.json, as a JSON value. */
  tokenizer: Record<string, unknown>;
  /** tokenizer_config.json, as a JSON value. */
  tokenizerConfig: Record<string, unknown>;
}

const SPACE_SYMBOL = '\u2581';

/** Throws ModelError STRATA_CONVERT for SentencePiece features that a Llama-style tokenizer.json cannot express. */
export function buildHfTokenizer(
  model: SentencePieceModel,
  options: { modelMaxLength: number },
): HfTokenizerFiles {
  const { trainer, normalizer } = model;
  const unsupported = (what: string): ModelError =>
    new ModelError('STRATA_CONVERT', `SentencePiece model: ${what} is not supported by this converter`);
  if (trainer.modelType !== ModelType.BPE)
    throw unsupported(`model_type ${trainer.modelType} (only BPE = 2)`);
  if (trainer.treatWhitespaceAsSuffix) throw unsupported('treat_whitespace_as_suffix');
  if (normalizer.precompiledCharsmapBytes > 0) {
    throw unsupported(`normalization rule "${normalizer.name}" (only identity)`);
  }

  const piece = (id: number): string | null => (id >= 0 ? (model.pieces[id]?.piece ?? null) : null);
  const unk = piece(trainer.unkId);
  const bos = piece(trainer.bosId);
  const eos = piece(trainer.eosId);
  const pad = piece(trainer.padId);
  if (unk === null) throw unsupported(`unk_id ${trainer.unkId} outside the vocabulary`);

  const ids = new Map<string, number>();
  model.pieces.forEach((p, id) => {
    if (ids.has(p.piece)) throw unsupported(`duplicate piece "${p.piece}"`);
    ids.set(p.piece, id);
  });

  const added = model.pieces.flatMap((p, id) =>
    p.type === PieceType.UNKNOWN || p.type === PieceType.CONTROL || p.type === PieceType.USER_DEFINED
      ? [
          {
            id,
            content: p.piece,
            single_word: false,
            lstrip: false,
            rstrip: false,
            normalized: false,
            special: p.type !== PieceType.USER_DEFINED,
          },
        ]
      : [],
  );

  const normalizers: Record<string, unknown>[] = [];
  if (normalizer.removeExtraWhitespaces) {
    normalizers.push(
      { type: 'Replace', pattern: { Regex: '^ +| +$' }, content: '' },
      { type: 'Replace', pattern: { Regex: ' {2,}' }, content: ' ' },
    );
  }
  if (normalizer.addDummyPrefix) normalizers.push({ type: 'Prepend', prepend: SPACE_SYMBOL });
  if (normalizer.escapeWhitespaces) {
    normalizers.push({ type: 'Replace', pattern: { String: ' ' }, content: SPACE_SYMBOL });
  }

  const decoders: Record<string, unknown>[] = [
    { type: 'Replace', pattern: { String: SPACE_SYMBOL }, content: ' ' },
    ...(trainer.byteFallback ? [{ type: 'ByteFallback' }] : []),
    { type: 'Fuse' },
    ...(normalizer.addDummyPrefix ? [{ type: 'Strip', content: ' ', start: 1, stop: 0 }] : []),
  ];

  const tokenizer = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: normalizers.length === 0 ? null : { type: 'Sequence', normalizers },
    pre_tokenizer: null,
    post_processor: bos === null ? null : bosTemplate(bos, trainer.bosId),
    decoder: { type: 'Sequence', decoders },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: unk,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: true,
      byte_fallback: trainer.byteFallback,
      ignore_merges: false,
      // fromEntries defines own properties, so a piece named "__proto__" stays a piece.
      vocab: Object.fromEntries(ids),
      merges: bpeMerges(model, ids),
    },
  };

  const tokenizerConfig = {
    add_bos_token: bos !== null,
    add_eos_token: false,
    added_tokens_decoder: Object.fromEntries(added.map(({ id, ...token }) => [String(id), token])),
    bos_token: bos,
    eos_token: eos,
    unk_token: unk,
    pad_token: pad,
    clean_up_tokenization_spaces: false,
    model_max_length: options.modelMaxLength,
    // Not LlamaTokenizer(Fast): transformers 5 rebuilds that class's pipeline from its own defaults
    // (Metaspace, no normalizer), which ignores the whitespace rules above; this class loads
    // tokenizer.json exactly as written.
    tokenizer_class: 'PreTrainedTokenizerFast',
  };
  return { tokenizer, tokenizerConfig };
}

/** Adds BOS before every sequence, as LlamaTokenizerFast's post-processor does. */
function bosTemplate(bos: string, bosId: number): Record<string, unknown> {
  const special = (typeId: number) => ({ SpecialToken: { id: bos, type_id: typeId } });
  const sequence = (id: 'A' | 'B', typeId: number) => ({ Sequence: { id, type_id: typeId } });
  return {
    type: 'TemplateProcessing',
    single: [special(0), sequence('A', 0)],
    pair: [special(0), sequence('A', 0), special(1), sequence('B', 1)],
    special_tokens: { [bos]: { id: bos, ids: [bosId], tokens: [bos] } },
  };
}

/** [left, right] pairs, best first. Splits are at code points, as Python's str slicing does. */
function bpeMerges(model: SentencePieceModel, ids: ReadonlyMap<string, number>): [string, string][] {
  const merges: { left: string; right: string; score: number }[] = [];
  for (const { piece, score } of model.pieces) {
    const chars = Array.from(piece);
    const local: { left: string; right: string; score: number; l: number; r: number }[] = [];
    for (let i = 1; i < chars.length; i += 1) {
      const left = chars.slice(0, i).join('');
      const right = chars.slice(i).join('');
      const l = ids.get(left);
      const r = ids.get(right);
      if (l !== undefined && r !== undefined) local.push({ left, right, score, l, r });
    }
    local.sort((a, b) => a.l - b.l || a.r - b.r);
    merges.push(...local);
  }
  // Array.prototype.sort is stable, as Python's sorted() is.
  merges.sort((a, b) => b.score - a.score);
  return merges.map(({ left, right }) => [left, right]);
}
