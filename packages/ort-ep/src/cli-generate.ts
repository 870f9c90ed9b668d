// mlx-ort generate: text from a decoder's folder (the ONNX model and its tokenizer.json, as
// transformers.js and onnxruntime-genai lay them out), streamed as it is generated, with the time
// to the first token and the tokens per second. The tokenizer is @huggingface/tokenizers (an
// optional dependency, resolved where onnxruntime-node is: the application's first, then this
// package's); the session is onnxruntime-common's with the 'mlx' provider, results on the device.
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import * as ort from 'onnxruntime-common';
import { mlx } from './backend/options.js';
import { generate, type GenerateOptions } from './generate.js';
import { requireOptional } from './runtime/packages.js';

export const TOKENIZER_INSTALL = 'npm install @huggingface/tokenizers@0.2';

interface TokenizerLike {
  encode(text: string, options?: { add_special_tokens?: boolean }): { ids: number[] };
  decode(ids: number[], options?: { skip_special_tokens?: boolean }): string;
  token_to_id(token: string): number | undefined;
}

export interface GenerateCliOptions {
  /** The model's folder (or the .onnx file itself). */
  path: string;
  prompt: string;
  maxNewTokens: number;
  device?: 'cpu' | 'gpu';
  sampling: GenerateOptions['sampling'];
  /** Where text goes as it is generated (default: stdout). */
  write?: (text: string) => void;
}

const readJson = (path: string): Record<string, unknown> | undefined =>
  existsSync(path) ? (JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>) : undefined;

/** The model file and the folder holding tokenizer.json, from a folder or a file. */
export function modelFiles(path: string): { model: string; dir: string } {
  if (existsSync(path) && statSync(path).isFile())
    return { model: path, dir: existsSync(join(dirname(path), 'tokenizer.json')) ? dirname(path) : dirname(dirname(path)) };
  for (const rel of ['model.onnx', 'decoder_model_merged.onnx', 'onnx/model.onnx', 'onnx/decoder_model_merged.onnx']) {
    const model = join(path, rel);
    if (existsSync(model)) return { model, dir: path };
  }
  throw new Error(`${path}: no model.onnx, decoder_model_merged.onnx or onnx/model.onnx there`);
}

/** The token ids that end generation: generation_config.json's eos_token_id, else the tokenizer's eos token. */
function stopTokens(dir: string, tok: TokenizerLike, config: Record<string, unknown>): number[] {
  const gen = readJson(join(dir, 'generation_config.json')) ?? readJson(join(dir, 'config.json')) ?? {};
  const eos = gen.eos_token_id;
  if (typeof eos === 'number') return [eos];
  if (Array.isArray(eos)) return eos.filter((x): x is number => typeof x === 'number');
  const name = typeof config.eos_token === 'string' ? config.eos_token : (config.eos_token as { content?: string } | undefined)?.content;
  const id = name ? tok.token_to_id(name) : undefined;
  return id === undefined ? [] : [id];
}

/** Generates text; returns the ids and the timings. */
export async function generateText(
  o: GenerateCliOptions,
): Promise<{ ids: number[]; text: string; firstMs: number; tokensPerSecond: number }> {
  const { model, dir } = modelFiles(o.path);
  const tokenizerFile = join(dir, 'tokenizer.json');
  if (!existsSync(tokenizerFile)) throw new Error(`${dir}: no tokenizer.json beside the model`);
  const lib = requireOptional<{ Tokenizer: new (json: object, config: object) => TokenizerLike }>('@huggingface/tokenizers');
  if (!lib)
    throw new Error(
      `mlx-ort generate reads tokenizer.json with @huggingface/tokenizers, which is not installed here: \`${TOKENIZER_INSTALL}\``,
    );
  const config = readJson(join(dir, 'tokenizer_config.json')) ?? {};
  const tok = new lib.Tokenizer(JSON.parse(readFileSync(tokenizerFile, 'utf8')), config);
  const inputIds = tok.encode(o.prompt).ids;
  if (!inputIds.length || inputIds.some((id) => typeof id !== 'number'))
    throw new Error(`the tokenizer gives no ids for the prompt ${JSON.stringify(o.prompt)} (words outside its vocabulary?)`);
  const session = await ort.InferenceSession.create(model, {
    executionProviders: [mlx(o.device ? { device: o.device } : {})],
    preferredOutputLocation: 'gpu-buffer',
  });
  const write = o.write ?? ((t: string) => void process.stdout.write(t));
  const ids: number[] = [];
  let shown = '';
  const t0 = performance.now();
  let firstMs = 0;
  try {
    for await (const id of generate(session, {
      inputIds,
      maxNewTokens: o.maxNewTokens,
      sampling: o.sampling,
      stopTokens: stopTokens(dir, tok, config),
      Tensor: ort.Tensor,
    })) {
      if (!ids.length) firstMs = performance.now() - t0;
      ids.push(id);
      // The text so far, decoded whole: a token may complete a character the previous one began.
      const text = tok.decode(ids, { skip_special_tokens: true });
      if (text.startsWith(shown)) {
        write(text.slice(shown.length));
        shown = text;
      }
    }
  } finally {
    await session.release();
  }
  const seconds = (performance.now() - t0 - firstMs) / 1000;
  const text = tok.decode(ids, { skip_special_tokens: true });
  if (text.startsWith(shown) && text.length > shown.length) write(text.slice(shown.length));
  return { ids, text, firstMs, tokensPerSecond: ids.length > 1 && seconds > 0 ? (ids.length - 1) / seconds : 0 };
}
