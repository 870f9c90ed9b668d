// ImageDecoder (opset 20): an encoded image (a 1-D uint8 tensor) to an [H, W, C] uint8 tensor,
// C = 3 for RGB and BGR, 1 for Grayscale. The output's shape depends on the data, and decoding is
// byte parsing, so the op is host code. It decodes with optional packages, each loaded on first use
// (README, "ImageDecoder"):
// - JPEG: libjpeg-turbo (@cornerstonejs/codec-libjpeg-turbo-8bit, wasm), the decoder of Pillow,
//   OpenCV and torchvision, whose pixels the ONNX suite expects to the last bit (other JPEG
//   decoders differ by one or two levels: IDCT and chroma upsampling are not fixed by the standard);
// - JPEG 2000: OpenJPEG (@cornerstonejs/codec-openjpeg, wasm), Pillow's decoder;
// - everything else (PNG, BMP, PNM, TIFF, WebP, GIF, ICO, TGA, QOI, ...): @napi-rs/image, the Rust
//   `image` crate as a prebuilt native addon with a synchronous API.
import { readFileSync } from 'node:fs';
import { OnnxDataType, type HostTensor } from '../onnx/index.js';
import { packageRequirers, resolvesOptional, type Requirer } from '../runtime/packages.js';
import type { Attrs } from '../registry/attrs.js';
import type { CheckContext, OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { checkHostElements } from './helpers/bounds.js';

type PixelFormat = 'RGB' | 'BGR' | 'Grayscale';

function parse(a: Attrs): PixelFormat {
  const f = a.string('pixel_format', 'RGB');
  if (f !== 'RGB' && f !== 'BGR' && f !== 'Grayscale') throw new RangeError(`pixel_format '${f}' is not one of RGB, BGR, Grayscale`);
  return f;
}

/** Pixels as decoded: 8-bit samples, `channels` of them per pixel (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA). */
interface Decoded {
  width: number;
  height: number;
  channels: number;
  data: Uint8Array;
}

// Loading the codecs --------------------------------------------------------------------------

export const IMAGE_PACKAGES = {
  jpeg: '@cornerstonejs/codec-libjpeg-turbo-8bit',
  jpeg2000: '@cornerstonejs/codec-openjpeg',
  image: '@napi-rs/image',
} as const;
type Codec = keyof typeof IMAGE_PACKAGES;

let requirersOverride: Requirer[] | undefined;

/** @internal Tests: resolve the codecs through `reqs` only (undefined: the usual places), and forget what was loaded. */
export function resetImageCodecs(reqs?: Requirer[]): void {
  requirersOverride = reqs;
  for (const k of Object.keys(loaded) as Codec[]) delete loaded[k];
  missing.clear();
}

/** Where the codecs are looked for (runtime/packages.ts), unless a test set the places. */
const requirers = (): readonly Requirer[] => requirersOverride ?? packageRequirers();

/** Whether `pkg` resolves (without loading it). Its main entry: not every package exports its package.json. */
const resolves = (pkg: string): boolean => resolvesOptional(pkg, requirers());

/** The emscripten module of a codec from the cornerstone family (embind classes, a heap). */
interface WasmDecoder {
  getEncodedBuffer(n: number): Uint8Array;
  decode(): void;
  getFrameInfo(): { width: number; height: number; bitsPerSample: number; componentCount: number; isSigned: boolean };
  getDecodedBuffer(): Uint8Array;
  delete(): void;
}
interface WasmModule {
  JPEGDecoder?: new () => WasmDecoder;
  J2KDecoder?: new () => WasmDecoder;
  /** Set by emscripten when the module aborted: it is unusable afterwards. */
  ABORT?: boolean;
}

interface Loaded {
  jpeg?: { module: WasmModule; messages: string[] };
  jpeg2000?: { module: WasmModule; messages: string[] };
  image?: NapiImage;
}
const loaded: Loaded = {};
const missing = new Map<Codec, string>();

/** The WebAssembly API used here (the project's TypeScript libs have no DOM types). */
interface WasmApi {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object, imports: object) => { exports: object };
}
const wasmApi = (): WasmApi => (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly;

/**
 * A cornerstone codec, instantiated synchronously: the wasm is compiled with WebAssembly.Module
 * and handed to emscripten through its instantiateWasm hook, so the runtime initialises before the
 * factory returns (its promise is then already settled) and the op stays synchronous.
 */
function loadWasmCodec(pkg: string): { module: WasmModule; messages: string[] } {
  let lastError: unknown;
  for (const req of requirers()) {
    let factory: (m: object) => Promise<unknown>;
    let wasm: string;
    try {
      factory = req(`${pkg}/decodewasmjs`) as typeof factory;
      wasm = req.resolve(`${pkg}/decodewasm`);
    } catch (e) {
      lastError = e;
      continue;
    }
    const WA = wasmApi();
    const compiled = new WA.Module(readFileSync(wasm));
    const messages: string[] = [];
    const module: WasmModule & Record<string, unknown> = {
      print: () => {}, // OpenJPEG's progress lines
      printErr: (s: string) => {
        messages.push(s);
        if (messages.length > 8) messages.shift();
      },
      instantiateWasm(imports: object, receive: (instance: object, module: object) => void) {
        const instance = new WA.Instance(compiled, imports);
        receive(instance, compiled);
        return instance.exports;
      },
    };
    factory(module).catch(() => {}); // settled already; a failure shows as the missing class below
    if (typeof module.JPEGDecoder !== 'function' && typeof module.J2KDecoder !== 'function')
      throw new Error(`${pkg} loaded, but its decoder did not initialise synchronously`);
    return { module, messages };
  }
  throw lastError ?? new Error(`${pkg} is not installed`);
}

/** The parts of @napi-rs/image used here. */
interface NapiImage {
  Transformer: new (
    input: Uint8Array,
  ) => {
    metadataSync(): { width: number; height: number; colorType: number };
    rawPixelsSync(): Uint8Array;
  };
}

function loadNapiImage(): NapiImage {
  let lastError: unknown;
  for (const req of requirers()) {
    try {
      const m = req(IMAGE_PACKAGES.image) as NapiImage;
      if (typeof m?.Transformer === 'function') return m;
    } catch (e) {
      lastError = e;
    }
  }
  throw lastError ?? new Error(`${IMAGE_PACKAGES.image} is not installed`);
}

const FORMAT_NAMES: Record<Codec, string> = { jpeg: 'JPEG', jpeg2000: 'JPEG 2000', image: 'PNG, BMP, PNM, TIFF, WebP and other' };

function codec<C extends Codec>(c: C): NonNullable<Loaded[C]> {
  const have = loaded[c];
  if (have && !(c !== 'image' && (have as { module: WasmModule }).module.ABORT)) return have as NonNullable<Loaded[C]>;
  const known = missing.get(c);
  if (known) throw new Error(known);
  try {
    const l = c === 'image' ? loadNapiImage() : loadWasmCodec(IMAGE_PACKAGES[c]);
    (loaded as Record<Codec, unknown>)[c] = l;
    return l as NonNullable<Loaded[C]>;
  } catch (e) {
    const why = e instanceof Error ? e.message.split('\n')[0] : String(e);
    const msg = `decoding ${FORMAT_NAMES[c]} images needs the optional package ${IMAGE_PACKAGES[c]} (npm install ${IMAGE_PACKAGES[c]}); loading it failed: ${why}`;
    missing.set(c, msg);
    throw new Error(msg);
  }
}

// Decoding --------------------------------------------------------------------------------------

const startsWith = (d: Uint8Array, sig: number[], at = 0): boolean => d.length >= at + sig.length && sig.every((b, i) => d[at + i] === b);

/** The codec a stream needs, from its signature. */
export function codecOf(d: Uint8Array): Codec {
  if (startsWith(d, [0xff, 0xd8, 0xff])) return 'jpeg';
  // A JP2 file (its signature box) or a bare JPEG 2000 codestream (SOC then SIZ).
  if (startsWith(d, [0, 0, 0, 0x0c, 0x6a, 0x50, 0x20, 0x20, 0x0d, 0x0a, 0x87, 0x0a]) || startsWith(d, [0xff, 0x4f, 0xff, 0x51]))
    return 'jpeg2000';
  return 'image';
}

/** 8-bit samples from `bits`-bit ones (little-endian 16-bit words above 8 bits), scaled to 0..255. */
function to8Bit(raw: Uint8Array, bits: number, count: number): Uint8Array {
  if (bits === 8) return raw.subarray(0, count);
  const out = new Uint8Array(count);
  const max = 2 ** bits - 1;
  for (let i = 0; i < count; i++) {
    const v = bits < 8 ? raw[i] : raw[2 * i] | (raw[2 * i + 1] << 8);
    out[i] = Math.round((Math.min(v, max) * 255) / max);
  }
  return out;
}

function decodeWasm(c: 'jpeg' | 'jpeg2000', data: Uint8Array): Decoded {
  const { module, messages } = codec(c);
  const Decoder = c === 'jpeg' ? module.JPEGDecoder : module.J2KDecoder;
  if (!Decoder) throw new Error(`${IMAGE_PACKAGES[c]} has no decoder class`);
  const name = c === 'jpeg' ? 'libjpeg-turbo' : 'OpenJPEG';
  messages.length = 0;
  const dec = new Decoder();
  try {
    try {
      dec.getEncodedBuffer(data.length).set(data);
      dec.decode();
    } catch {
      // The codec throws a C++ exception (a pointer, no message) for a stream it cannot read.
      throw new RangeError(`${name} could not decode the ${FORMAT_NAMES[c]} stream (corrupt, truncated or unsupported)${detail(messages)}`);
    }
    const info = dec.getFrameInfo();
    if (!(info.width > 0 && info.height > 0 && info.componentCount > 0))
      throw new RangeError(`${name} could not decode the ${FORMAT_NAMES[c]} stream (corrupt, truncated or unsupported)${detail(messages)}`);
    if (info.isSigned) throw new RangeError(`${FORMAT_NAMES[c]} images of signed samples are not supported`);
    if (![1, 2, 3, 4].includes(info.componentCount))
      throw new RangeError(`${FORMAT_NAMES[c]} images of ${info.componentCount} components are not supported (1 to 4)`);
    if (c === 'jpeg' && info.componentCount === 4) throw new RangeError('CMYK JPEG images are not supported');
    const count = info.width * info.height * info.componentCount;
    checkHostElements(count, `a decoded image of ${info.height}x${info.width}x${info.componentCount}`);
    // The decoded buffer is a view of the wasm heap: copy it out before the decoder is freed.
    const raw = dec.getDecodedBuffer();
    const samples = to8Bit(new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength), info.bitsPerSample, count);
    return { width: info.width, height: info.height, channels: info.componentCount, data: Uint8Array.from(samples) };
  } finally {
    dec.delete();
  }
}

const detail = (messages: string[]): string => (messages.length ? `: ${messages.join('; ').slice(0, 300)}` : '');

/** @napi-rs/image's colour types: [channels, bytes per sample]. */
const NAPI_COLOR_TYPES: Record<number, [number, number]> = {
  0: [1, 1], // L8
  1: [2, 1], // La8
  2: [3, 1], // Rgb8
  3: [4, 1], // Rgba8
  4: [1, 2], // L16
  5: [2, 2], // La16
  6: [3, 2], // Rgb16
  7: [4, 2], // Rgba16
  8: [3, 4], // Rgb32F
  9: [4, 4], // Rgba32F
};

function decodeNapi(data: Uint8Array): Decoded {
  const { Transformer } = codec('image');
  let pixels: Uint8Array;
  let meta: { width: number; height: number; colorType: number };
  try {
    const t = new Transformer(data);
    meta = t.metadataSync();
    const type = NAPI_COLOR_TYPES[meta.colorType];
    if (!type) throw new Error(`colour type ${meta.colorType} is not supported`);
    checkHostElements(meta.width * meta.height * type[0], `a decoded image of ${meta.height}x${meta.width}x${type[0]}`);
    pixels = t.rawPixelsSync();
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    throw new RangeError(`the image could not be decoded (${why})`);
  }
  const [channels, bytes] = NAPI_COLOR_TYPES[meta.colorType];
  const count = meta.width * meta.height * channels;
  if (pixels.byteLength !== count * bytes)
    throw new RangeError(
      `the decoder returned ${pixels.byteLength} bytes for a ${meta.width}x${meta.height} image of ${channels} channel(s)`,
    );
  let out: Uint8Array;
  if (bytes === 1) out = Uint8Array.from(pixels);
  else if (bytes === 2) out = to8Bit(pixels, 16, count);
  else {
    const f = new Float32Array(pixels.buffer.slice(pixels.byteOffset, pixels.byteOffset + pixels.byteLength));
    out = Uint8Array.from(f, (v) => Math.round(Math.min(Math.max(v, 0), 1) * 255));
  }
  return { width: meta.width, height: meta.height, channels, data: out };
}

/**
 * The decoded pixels in the requested layout. Gray from colour is ITU-R 601-2 luma with Pillow's
 * fixed-point weights (what the ONNX reference applies); colour from gray repeats the sample; an
 * alpha channel is dropped (not composited), as Pillow's conversion to RGB does.
 */
function arrange(img: Decoded, format: PixelFormat): Uint8Array {
  const n = img.width * img.height;
  const { channels: ch, data } = img;
  const gray = ch <= 2;
  if (format === 'Grayscale') {
    const out = new Uint8Array(n);
    for (let p = 0; p < n; p++) {
      const s = p * ch;
      out[p] = gray ? data[s] : (data[s] * 19595 + data[s + 1] * 38470 + data[s + 2] * 7471 + 0x8000) >> 16;
    }
    return out;
  }
  const out = new Uint8Array(n * 3);
  const [r, b] = format === 'RGB' ? [0, 2] : [2, 0];
  for (let p = 0; p < n; p++) {
    const s = p * ch;
    if (gray) out.fill(data[s], 3 * p, 3 * p + 3);
    else {
      out[3 * p + r] = data[s];
      out[3 * p + 1] = data[s + 1];
      out[3 * p + b] = data[s + 2];
    }
  }
  return out;
}

export function decodeImage(data: Uint8Array, format: PixelFormat): HostTensor {
  if (data.length === 0) throw new RangeError('encoded_stream is empty');
  const c = codecOf(data);
  const img = c === 'image' ? decodeNapi(data) : decodeWasm(c, data);
  return {
    dtype: OnnxDataType.UINT8,
    dims: [img.height, img.width, format === 'Grayscale' ? 1 : 3],
    data: arrange(img, format),
  };
}

function host(ctx: OpContext<PixelFormat>): HostTensor[] {
  const x = ctx.host(0);
  if (x.dtype !== OnnxDataType.UINT8) throw new TypeError(`encoded_stream must be uint8, got element type ${x.dtype}`);
  if (x.dims.length !== 1) throw new RangeError(`encoded_stream must be 1-D, got [${x.dims.join(', ')}]`);
  const d = x.data as Uint8Array;
  return [decodeImage(new Uint8Array(d.buffer, d.byteOffset, d.length), ctx.params)];
}

function check(ctx: CheckContext<PixelFormat>): string | undefined {
  const t = ctx.inputType(0);
  if (t !== undefined && t !== OnnxDataType.UINT8) return `encoded_stream must be uint8, got element type ${t}`;
  // The format is known only at run time: each codec is checked when a stream needs it. With none
  // installed, the node is not taken, and the reason says what to install.
  const pkgs = Object.values(IMAGE_PACKAGES);
  if (!pkgs.some(resolves)) return `no image decoder is installed: add ${pkgs.join(', ')} (optional dependencies)`;
  return undefined;
}

export const imageDecoderOps: OpEntry[] = [
  onnxOp('ImageDecoder', 20, {
    parse,
    placement: 'host',
    check,
    host,
    note: 'host; JPEG through libjpeg-turbo, JPEG 2000 through OpenJPEG (both wasm), other formats through @napi-rs/image; all optional',
  }),
];
