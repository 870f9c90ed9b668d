// The second process of test/api/prefix-cache.test.ts: opens a prefix cache folder another process
// wrote and generates from a prompt that extends an entry there, on mlx. Prints one JSON line: the
// tokens, the first step's logits and the cache's stats.
//   node --conditions=source --import tsx prefix-cache-child.ts MODEL DIR PROMPT_JSON
import { createRequire } from 'node:module';
import { PrefixCache, generate } from '../../src/index.js';

const require = createRequire(import.meta.url);
const ort = require('onnxruntime-node') as typeof import('onnxruntime-node');
const [model, dir, promptJson] = process.argv.slice(2);
const session = await ort.InferenceSession.create(model, { executionProviders: [{ name: 'mlx', device: 'cpu' }] } as never);
const cache = new PrefixCache({ model: 'llama-33', dir });
const tokens: number[] = [];
let first: number[] | undefined;
for await (const t of generate(session, {
  inputIds: JSON.parse(promptJson) as number[],
  maxNewTokens: 12,
  Tensor: ort.Tensor as never,
  prefixCache: cache,
  logitsProcessor: (l) => {
    first ??= Array.from(l);
  },
}))
  tokens.push(t);
await session.release();
console.log(JSON.stringify({ tokens, first, stats: cache.stats }));
