// Tiny encoder-decoders (random weights, fixed seeds) exported with torch + transformers by
// export-seq2seq.py in optimum's layout (onnx/encoder_model.onnx, onnx/decoder_model_merged.onnx)
// with transformers' own greedy generate tokens (reference.json): a T5 (also config.json and
// generation_config.json, as transformers.js loads it), a Whisper-shaped model
// (input_features.bin, its encoder's input) and one with timestamp tokens whose reference is
// transformers' timestamped greedy decoding (its Whisper logits processors). The exports of the current script are committed in
// test/fixtures/seq2seq (a few MB; the tests need no Python); a changed script exports again
// into .cache/ at the repository root with the project's bench Python
// (tools/install-bench-python.sh installs it where it is missing): commit that export there then.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../../..', import.meta.url));
const script = fileURLToPath(new URL('./export-seq2seq.py', import.meta.url));

export interface Seq2SeqReference {
  maxNewTokens: number;
  decoderStartTokenId: number;
  eosTokenId: number;
  /** Each case's encoder input and transformers' greedy output (the decoder start token first). */
  cases: { inputIds: number[]; tokens: number[] }[];
  /** A case whose decoder starts from a prompt (decoder_input_ids): the output begins with it. */
  prompted: { inputIds: number[]; decoderInputIds: number[]; tokens: number[] };
}

export interface WhisperReference {
  maxNewTokens: number;
  eosTokenId: number;
  /** [1, mel bins, frames] of input_features.bin (float32, little-endian). */
  featureDims: number[];
  /** The forced decoder prompt, and transformers' greedy output (the prompt first). */
  decoderInputIds: number[];
  tokens: number[];
}

/**
 * The folder of an exported model: the committed export (test/fixtures/seq2seq, made by this
 * version of the script: its hash is in script-hash there), else one exported on the first call.
 */
function exported(kind: 't5' | 'whisper' | 'whisper-ts'): string {
  const hash = createHash('sha256').update(readFileSync(script)).digest('hex').slice(0, 12);
  const fixtures = fileURLToPath(new URL('../fixtures/seq2seq/', import.meta.url));
  const committed = join(fixtures, `${kind}-tiny`);
  if (existsSync(join(committed, 'reference.json')) && readFileSync(join(fixtures, 'script-hash'), 'utf8').trim() === hash)
    return committed;
  const dir = join(root, '.cache', `${kind}-tiny-${hash}`);
  if (existsSync(join(dir, 'reference.json'))) return dir;
  const python = execFileSync('bash', [join(root, 'tools', 'install-bench-python.sh')], { encoding: 'utf8' }).trim();
  const tmp = `${dir}.${process.pid}.tmp`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  execFileSync(python, [script, kind, tmp], { stdio: ['ignore', 'ignore', 'pipe'], maxBuffer: 64 * 2 ** 20 });
  // Another process may have finished the same export meanwhile: keep the first.
  if (existsSync(join(dir, 'reference.json'))) rmSync(tmp, { recursive: true, force: true });
  else {
    rmSync(dir, { recursive: true, force: true });
    renameSync(tmp, dir);
  }
  return dir;
}

/** The T5's folder. */
export const t5Folder = (): string => exported('t5');
export const t5Reference = (dir: string): Seq2SeqReference => JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8'));

/** The Whisper-shaped model's folder. */
export const whisperFolder = (): string => exported('whisper');
export const whisperReference = (dir: string): WhisperReference => JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8'));

export interface WhisperTimestampReference extends WhisperReference {
  /** The timestamped run without suppress_tokens and begin_suppress_tokens (the prompt not included). */
  plain: number[];
}

/** The Whisper-shaped model with timestamp tokens (384 <|0.00|> ... 684 <|6.00|>). */
export const whisperTsFolder = (): string => exported('whisper-ts');
export const whisperTsReference = (dir: string): WhisperTimestampReference => JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8'));

/** Whisper's input_features, as the export fed them. */
export function whisperFeatures(dir: string): Float32Array {
  const bytes = readFileSync(join(dir, 'input_features.bin'));
  return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
}
