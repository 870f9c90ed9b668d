// A prefix cache for generate(): the KV state of token sequences a session has already run, kept
// so a later prompt that starts with one of them (the next turn of a chat, a shared system prompt)
// feeds only the tokens after it. Entries are keyed by the model (a caller's name for its weights),
// the cache layout (each layer's past name, heads, head size and element type) and the tokens.
//
// With `dir`, every entry is also a file there, named by the SHA-256 of its key (content-addressed)
// in the safetensors format: one tensor per past input, [heads, tokens, head size], the tokens and
// the model's name in the header's metadata. A cache opened on the same folder in another process
// indexes those headers and reads an entry's data the first time a prompt matches it.
//
// What is kept is host memory (typed arrays), bounded by `maxBytes` (least recently used entries
// leave memory first; their files stay). A matched entry is copied into fresh past tensors, so no
// run can write into it (a growing cache on the mlx backend is appended in place).
import { createHash } from 'node:crypto';
import {
  closeSync,
  existsSync,
  fstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  readdirSync,
  renameSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import type { Tensor } from 'onnxruntime-common';
import * as mx from '@mlx/core';
import { deviceBufferOf } from './backend/device-buffer.js';
import { OrtMlxError } from './errors.js';
import { download } from './runtime/convert.js';

/** A past input of the decoder as generate() feeds it (generate.ts's cacheNames()). */
export interface PrefixLayer {
  past: string;
  /** [heads, head size] */
  dims: [number, number];
  type: Tensor.Type;
}

export interface PrefixCacheOptions {
  /**
   * The name of the model's weights (a path, a hash, a version): entries made with another name are
   * never used. Required: two models of the same shapes would otherwise share caches.
   */
  model: string;
  /** A folder where entries are also written as safetensors files, and found by other processes. */
  dir?: string;
  /** Host memory the entries' data may take (default 1 GiB); least recently used ones leave first. */
  maxBytes?: number;
  /** Sequences shorter than this are not kept (default 16 tokens). */
  minTokens?: number;
}

type KvData = Float32Array | Uint16Array;

interface Entry {
  tokens: Int32Array;
  layout: string;
  /** One array per layer, [heads, tokens.length, head size]; absent until read from `file`. */
  data?: KvData[];
  file?: string;
  bytes: number;
  used: number;
}

/** What generate() gets for a prompt: how many of its tokens the cache holds, and their pasts. */
export interface PrefixMatch {
  length: number;
  entry: Entry;
}

const HEADER_LIMIT = 64 * 2 ** 20;
const FORMAT = 'mlx-ort-prefix-cache/1';

const layoutOf = (layers: readonly PrefixLayer[]) => layers.map((l) => `${l.past}:${l.dims.join('x')}:${l.type}`).join(';');

const elemBytes = (type: Tensor.Type) => (type === 'float16' ? 2 : 4);

export class PrefixCache {
  readonly model: string;
  readonly dir: string | undefined;
  readonly maxBytes: number;
  readonly minTokens: number;
  private readonly entries: Entry[] = [];
  private clock = 0;
  /** Reuses and stores since creation: what the cache saved (tokens not run again). */
  readonly stats = { hits: 0, misses: 0, tokensReused: 0, stored: 0, filesRead: 0 };

  constructor(options: PrefixCacheOptions) {
    const o = (options ?? {}) as Partial<PrefixCacheOptions>;
    if (typeof o.model !== 'string' || !o.model)
      throw new TypeError(`PrefixCache: model must be a non-empty string naming the model's weights, got ${JSON.stringify(o.model)}`);
    if (o.dir !== undefined && (typeof o.dir !== 'string' || !o.dir)) throw new TypeError('PrefixCache: dir must be a non-empty path');
    const maxBytes = o.maxBytes ?? 2 ** 30;
    if (typeof maxBytes !== 'number' || !Number.isSafeInteger(maxBytes) || maxBytes < 0)
      throw new RangeError(`PrefixCache: maxBytes must be an integer ≥ 0, got ${String(o.maxBytes)}`);
    const minTokens = o.minTokens ?? 16;
    if (typeof minTokens !== 'number' || !Number.isSafeInteger(minTokens) || minTokens < 1)
      throw new RangeError(`PrefixCache: minTokens must be an integer ≥ 1, got ${String(o.minTokens)}`);
    this.model = o.model;
    this.dir = o.dir;
    this.maxBytes = maxBytes;
    this.minTokens = minTokens;
    if (this.dir !== undefined) {
      let names: string[];
      try {
        mkdirSync(this.dir, { recursive: true });
        names = readdirSync(this.dir).sort();
      } catch (e) {
        throw new OrtMlxError(`PrefixCache: dir ${this.dir} cannot be used as the cache's folder: ${(e as Error).message}`, { cause: e });
      }
      for (const f of names) {
        if (!f.endsWith('.safetensors')) continue;
        const e = this.indexFile(join(this.dir, f));
        if (e) this.entries.push(e);
      }
    }
  }

  /** Entries known (in memory or in `dir`). */
  get size(): number {
    return this.entries.length;
  }

  /** Host bytes the entries' data take now. */
  get bytesInMemory(): number {
    return this.entries.reduce((n, e) => n + (e.data ? e.bytes : 0), 0);
  }

  /** Forgets every entry held in memory (files in `dir` stay, and are found again). */
  clear(): void {
    for (const e of this.entries) e.data = undefined;
    this.entries.splice(0, this.entries.length, ...this.entries.filter((e) => e.file));
  }

  /**
   * The longest entry of this layout whose tokens begin `tokens`, used for at most
   * `tokens.length - 1` of them (the last token is always run: its logits choose the next one).
   */
  match(tokens: readonly number[], layers: readonly PrefixLayer[]): PrefixMatch | undefined {
    const layout = layoutOf(layers);
    let best: PrefixMatch | undefined;
    for (const e of this.entries) {
      if (e.layout !== layout) continue;
      const n = Math.min(e.tokens.length, tokens.length - 1);
      let k = 0;
      while (k < n && e.tokens[k] === tokens[k]) k++;
      if (k >= this.minTokens && (!best || k > best.length)) best = { length: k, entry: e };
    }
    if (best) {
      this.stats.hits++;
      this.stats.tokensReused += best.length;
    } else this.stats.misses++;
    return best;
  }

  /**
   * Fresh host tensors holding a match's first `length` positions: [1, heads, rows, head size]
   * with rows = `capacity` (the rest zeros) or `length`.
   */
  pasts(m: PrefixMatch, layers: readonly PrefixLayer[], T: typeof Tensor, capacity: number | undefined): Tensor[] {
    const data = this.dataOf(m.entry, layers);
    m.entry.used = ++this.clock;
    const L = m.entry.tokens.length;
    const rows = capacity ?? m.length;
    return layers.map((l, i) => {
      const [H, D] = l.dims;
      const src = data[i];
      const out = l.type === 'float16' ? new Uint16Array(H * rows * D) : new Float32Array(H * rows * D);
      for (let h = 0; h < H; h++) out.set(src.subarray(h * L * D, (h * L + m.length) * D), h * rows * D);
      return new T(l.type as 'float32', out as Float32Array, [1, H, rows, D]);
    });
  }

  /**
   * Keeps the KV state of `tokens` (the first `tokens.length` positions of each past) unless an
   * entry already holds them or a longer sequence that starts with them; entries that are
   * prefixes of the new one are dropped (it serves their prompts too).
   */
  async store(tokens: readonly number[], layers: readonly PrefixLayer[], past: readonly Tensor[]): Promise<void> {
    if (tokens.length < this.minTokens) return;
    const layout = layoutOf(layers);
    const covers = (e: Entry) => e.tokens.length >= tokens.length && tokens.every((t, i) => e.tokens[i] === t);
    const same = this.entries.filter((e) => e.layout === layout);
    if (same.some(covers)) return;
    const data: KvData[] = [];
    for (let i = 0; i < layers.length; i++) data.push(await rowsOf(past[i], layers[i], tokens.length));
    const bytes = data.reduce((n, d) => n + d.byteLength, 0);
    const entry: Entry = { tokens: Int32Array.from(tokens), layout, data, bytes, used: ++this.clock };
    for (const e of same)
      if (e.tokens.length < tokens.length && e.tokens.every((t, i) => tokens[i] === t)) this.entries.splice(this.entries.indexOf(e), 1);
    if (this.dir !== undefined) entry.file = this.write(entry, layers);
    this.entries.push(entry);
    this.stats.stored++;
    this.evict();
  }

  private evict(): void {
    let total = this.bytesInMemory;
    const held = this.entries.filter((e) => e.data).sort((a, b) => a.used - b.used);
    for (const e of held) {
      if (total <= this.maxBytes) break;
      total -= e.bytes;
      e.data = undefined;
      if (!e.file) this.entries.splice(this.entries.indexOf(e), 1);
    }
  }

  private keyOf(tokens: Int32Array, layout: string): string {
    const h = createHash('sha256');
    h.update(`${FORMAT}\0${this.model}\0${layout}\0`);
    h.update(new Uint8Array(tokens.buffer, tokens.byteOffset, tokens.byteLength));
    return h.digest('hex');
  }

  /** Writes an entry as <sha256>.safetensors (through a temporary name, so readers never see half a file). */
  private write(e: Entry, layers: readonly PrefixLayer[]): string {
    const dir = this.dir as string;
    const file = join(dir, `${this.keyOf(e.tokens, e.layout)}.safetensors`);
    if (existsSync(file)) return file;
    const header: Record<string, unknown> = {
      __metadata__: { format: FORMAT, model: this.model, layout: e.layout, tokens: JSON.stringify(Array.from(e.tokens)) },
    };
    let offset = 0;
    layers.forEach((l, i) => {
      const d = (e.data as KvData[])[i];
      header[l.past] = {
        dtype: l.type === 'float16' ? 'F16' : 'F32',
        shape: [l.dims[0], e.tokens.length, l.dims[1]],
        data_offsets: [offset, offset + d.byteLength],
      };
      offset += d.byteLength;
    });
    let json = JSON.stringify(header);
    json += ' '.repeat((8 - ((8 + Buffer.byteLength(json)) % 8)) % 8);
    const head = Buffer.alloc(8);
    head.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
    const parts = [head, Buffer.from(json), ...(e.data as KvData[]).map((d) => Buffer.from(d.buffer, d.byteOffset, d.byteLength))];
    const tmp = `${file}.${process.pid}.tmp`;
    try {
      writeFileSync(tmp, Buffer.concat(parts));
      renameSync(tmp, file);
    } catch (e) {
      throw new OrtMlxError(`PrefixCache: the entry cannot be written to ${dir}: ${(e as Error).message}`, { cause: e });
    }
    return file;
  }

  /** An entry for a file of this model, from its header alone; undefined for other models' files or files that are not ours. */
  private indexFile(file: string): Entry | undefined {
    let header: ReturnType<typeof readHeader>;
    try {
      header = readHeader(file);
    } catch {
      return undefined;
    }
    const meta = header.json.__metadata__ as Record<string, unknown> | undefined;
    if (!meta || meta.format !== FORMAT || meta.model !== this.model || typeof meta.layout !== 'string' || typeof meta.tokens !== 'string')
      return undefined;
    let tokens: unknown;
    try {
      tokens = JSON.parse(meta.tokens);
    } catch {
      return undefined;
    }
    if (!Array.isArray(tokens) || !tokens.length || !tokens.every((t) => Number.isInteger(t) && t >= -(2 ** 31) && t < 2 ** 31))
      return undefined;
    return { tokens: Int32Array.from(tokens as number[]), layout: meta.layout, file, bytes: header.dataBytes, used: 0 };
  }

  /** An entry's data, read from its file the first time (checked against the layout). */
  private dataOf(e: Entry, layers: readonly PrefixLayer[]): KvData[] {
    if (e.data) return e.data;
    const file = e.file as string;
    const { json, dataStart, dataBytes } = readHeader(file);
    const L = e.tokens.length;
    // The file must hold exactly the layers' data: nothing larger is read into memory.
    const want = layers.reduce((n, l) => n + l.dims[0] * L * l.dims[1] * elemBytes(l.type), 0);
    if (dataBytes !== want)
      throw new OrtMlxError(`PrefixCache: ${file} holds ${dataBytes} bytes of data, not the ${want} its ${L} tokens take in this layout`);
    let bytes: Buffer;
    try {
      bytes = readFileSync(file);
    } catch (e) {
      throw new OrtMlxError(`PrefixCache: ${file} cannot be read: ${(e as Error).message}`, { cause: e });
    }
    const data = layers.map((l) => {
      const t = json[l.past] as { dtype?: unknown; shape?: unknown; data_offsets?: unknown } | undefined;
      const want = l.type === 'float16' ? 'F16' : 'F32';
      const shape = [l.dims[0], L, l.dims[1]];
      const offs = t?.data_offsets;
      if (
        !t ||
        t.dtype !== want ||
        JSON.stringify(t.shape) !== JSON.stringify(shape) ||
        !Array.isArray(offs) ||
        offs.length !== 2 ||
        !offs.every((x) => Number.isSafeInteger(x)) ||
        offs[1] - offs[0] !== shape[0] * shape[1] * shape[2] * elemBytes(l.type) ||
        offs[0] < 0 ||
        dataStart + offs[1] > bytes.length
      )
        throw new OrtMlxError(`PrefixCache: ${file} does not hold '${l.past}' as ${want} [${shape.join(', ')}] within the file`);
      const copy = bytes.subarray(dataStart + offs[0], dataStart + offs[1]);
      // A copy: the file's buffer is not aligned for a typed array in general.
      const out = l.type === 'float16' ? new Uint16Array(copy.length / 2) : new Float32Array(copy.length / 4);
      new Uint8Array(out.buffer).set(copy);
      return out;
    });
    e.data = data;
    e.bytes = data.reduce((n, d) => n + d.byteLength, 0);
    this.stats.filesRead++;
    this.evict();
    return data;
  }
}

/** A safetensors file's header (checked: its length within the file and a limit, a JSON object). */
function readHeader(file: string): { json: Record<string, unknown>; dataStart: number; dataBytes: number } {
  let fd: number;
  try {
    // Regular files only: a FIFO or a device under the name would block or never end.
    if (!statSync(file).isFile()) throw new Error('not a regular file');
    fd = openSync(file, 'r');
  } catch (e) {
    throw new OrtMlxError(`PrefixCache: ${file} cannot be opened: ${(e as Error).message}`, { cause: e });
  }
  try {
    const size = fstatSync(fd).size;
    const head = Buffer.alloc(8);
    if (size < 8 || readSync(fd, head, 0, 8, 0) !== 8) throw new OrtMlxError(`PrefixCache: ${file} is too short for a safetensors header`);
    const n = head.readBigUInt64LE();
    if (n > BigInt(Math.min(HEADER_LIMIT, size - 8)))
      throw new OrtMlxError(`PrefixCache: ${file} has a header of ${n} bytes, past the file`);
    const text = Buffer.alloc(Number(n));
    if (readSync(fd, text, 0, text.length, 8) !== text.length) throw new OrtMlxError(`PrefixCache: ${file}: short read`);
    const json = JSON.parse(text.toString('utf8')) as unknown;
    if (typeof json !== 'object' || json === null || Array.isArray(json))
      throw new OrtMlxError(`PrefixCache: ${file}: the header is not a JSON object`);
    return { json: json as Record<string, unknown>, dataStart: 8 + text.length, dataBytes: size - 8 - text.length };
  } finally {
    closeSync(fd);
  }
}

/**
 * The first `n` positions of a past tensor [1, heads, rows, head size] as [heads, n, head size]: an
 * mlx device tensor is sliced on the device first, so only those rows come down.
 */
async function rowsOf(t: Tensor, l: PrefixLayer, n: number): Promise<KvData> {
  const [H, D] = l.dims;
  if (t.dims.length !== 4 || t.dims[0] !== 1 || t.dims[1] !== H || t.dims[3] !== D || t.dims[2] < n)
    throw new OrtMlxError(`PrefixCache: '${l.past}' is [${t.dims.join(', ')}], not [1, ${H}, ≥ ${n}, ${D}]`);
  const rows = t.dims[2];
  const own = deviceBufferOf(t);
  if (own?.value) {
    const a = own.value.array;
    const part = mx.scope(() => mx.slice(mx.reshape(a, [H, rows, D]), [0, 0, 0], [H, n, D], [1, 1, 1]));
    try {
      return download(part, own.value.onnxType).data as KvData;
    } finally {
      part.dispose();
    }
  }
  const all = (t.location === 'cpu' || t.location === 'cpu-pinned' ? t.data : await t.getData()) as KvData;
  const out = all instanceof Uint16Array ? new Uint16Array(H * n * D) : new Float32Array(H * n * D);
  for (let h = 0; h < H; h++) out.set(all.subarray(h * rows * D, (h * rows + n) * D), h * n * D);
  return out;
}
