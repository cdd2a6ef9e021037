// The tokenizer worker thread (see encoder-worker.ts): its own `tokenizers` instance, loaded from
// the same tokenizer.json, encodes prompts so that the per-token work of a long prompt (the ids
// copied into JS, the Encoding freed) happens here and not on the service's event loop. Ids go
// back as a transferred Int32Array.
//
// Self-contained on purpose (node builtins and `tokenizers` only, type annotations only): tests
// run it from src/ as TypeScript through Node's type stripping, the service from dist/.
import { parentPort, workerData } from 'node:worker_threads';
import type { Tokenizer as HfTokenizer } from 'tokenizers';
import tokenizers from 'tokenizers';

/** workerData: where the tokenizer.json is (as TokenizerSource in model-files.ts). */
export type WorkerSource = { kind: 'file'; path: string } | { kind: 'json'; json: string };
/** Main thread -> worker. */
export interface EncodeMessage {
  id: number;
  text: string;
}
/** Worker -> main thread: 'ready' once loaded, then one answer per EncodeMessage. */
export type WorkerReply =
  | { type: 'ready' }
  | { type: 'ids'; id: number; ids: Int32Array }
  | { type: 'error'; id: number; message: string };

const port = parentPort;
if (port === null) throw new Error('tokenizer-worker.ts runs as a worker thread only');
const source = workerData as WorkerSource;
// A load failure throws here: the main thread sees the worker's 'error' event.
const hf: HfTokenizer =
  source.kind === 'file'
    ? tokenizers.Tokenizer.fromFile(source.path)
    : tokenizers.Tokenizer.fromString(source.json);

port.on('message', (message: EncodeMessage) => {
  hf.encode(message.text, null, { addSpecialTokens: false }).then(
    (encoding) => {
      const ids = Int32Array.from(encoding.getIds());
      const reply: WorkerReply = { type: 'ids', id: message.id, ids };
      port.postMessage(reply, [ids.buffer]);
    },
    (err: unknown) => {
      const reply: WorkerReply = {
        type: 'error',
        id: message.id,
        message: err instanceof Error ? err.message : String(err),
      };
      port.postMessage(reply);
    },
  );
});
const ready: WorkerReply = { type: 'ready' };
port.postMessage(ready);
