// The harness serves the chat endpoint too, but small test models often ship without a chat
// template. For those, this builds a folder beside the harness' other files with the model's
// files (weights symlinked, not copied) and a plain template added to tokenizer_config.json.
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';

// Each message's content on its own line, then an open line for the reply.
const PLAIN_CHAT_TEMPLATE =
  "{% for message in messages %}{{ message['content'] }}\n{% endfor %}{% if add_generation_prompt %}{% endif %}";

export function modelDirWithChatTemplate(modelDir: string, into: string): string {
  const config = JSON.parse(readFileSync(join(modelDir, 'tokenizer_config.json'), 'utf8')) as Record<
    string,
    unknown
  >;
  if (config.chat_template) return modelDir;
  const dir = join(into, 'model');
  if (existsSync(dir)) return dir;
  mkdirSync(dir);
  for (const name of readdirSync(modelDir)) {
    if (name === 'tokenizer_config.json') continue;
    if (name.endsWith('.safetensors')) symlinkSync(join(modelDir, name), join(dir, name));
    else copyFileSync(join(modelDir, name), join(dir, name));
  }
  writeFileSync(
    join(dir, 'tokenizer_config.json'),
    JSON.stringify({ ...config, chat_template: PLAIN_CHAT_TEMPLATE }),
  );
  return dir;
}
