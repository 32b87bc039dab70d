// Golden oracle for kvcpt's tokenizer: llama3-tokenizer-js under node.
// Reads JSON Lines {"text": ...} on stdin, writes one line of space-separated
// ids per document (no BOS/EOS), in the same order.
//   --allow-special   parse spelled-out special tokens (the package's default);
//                     without it they are ordinary text, as in kvcpt's default
//   --roundtrip       also check decode(encode(text)) == text, exit 1 if not
//   --bench           print {"oracle_mb_per_s": ..., "bytes": ..., "seconds": ...}
//                     instead of ids (encoding time only)
// Usage: node data/oracle/llama3_oracle.mjs [flags] < docs.jsonl
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = path.join(here, '../../third_party/node_modules/llama3-tokenizer-js/bundle/llama3-tokenizer-with-baked-data.js');
const { default: tokenizer } = await import(pkg);

const args = new Set(process.argv.slice(2));
// A regex that never matches turns the special-token split off.
const options = args.has('--allow-special') ? { bos: false, eos: false }
                                             : { bos: false, eos: false, specialTokenRegex: /(?!)/g };
const lines = readFileSync(0, 'utf8').split('\n').filter((l) => l.length > 0);
const texts = lines.map((l) => JSON.parse(l).text);

if (args.has('--bench')) {
  const bytes = texts.reduce((s, t) => s + Buffer.byteLength(t, 'utf8'), 0);
  const t0 = process.hrtime.bigint();
  let count = 0;
  for (const t of texts) count += tokenizer.encode(t, options).length;
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ oracle_mb_per_s: bytes / 1e6 / seconds, bytes, seconds, tokens: count }));
} else {
  const out = [];
  let bad = 0;
  for (let i = 0; i < texts.length; i++) {
    const ids = tokenizer.encode(texts[i], options);
    if (args.has('--roundtrip') && tokenizer.decode(ids) !== texts[i]) {
      console.error(`oracle: document ${i + 1}: decode(encode(x)) != x`);
      bad++;
    }
    out.push(ids.join(' '));
  }
  process.stdout.write(out.join('\n') + (out.length ? '\n' : ''));
  if (bad) process.exit(1);
}
