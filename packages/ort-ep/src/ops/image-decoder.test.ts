// ImageDecoder on streams written here byte by byte (PPM, PGM, BMP, PNG through node's zlib), so
// the expected pixels are the ones encoded: layouts (RGB, BGR, Grayscale), alpha, gray expansion,
// 16-bit samples; JPEG and JPEG 2000 against the ONNX suite's Pillow outputs (conformance) and here
// for their failure modes. onnxruntime has no ImageDecoder kernel, so it cannot be the reference.
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { crc32, deflateSync } from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import { model, node, v } from '../../test/helpers/build.js';
import { ort } from '../../test/helpers/ort.js';
import { sharedPath } from '../../test/helpers/shared.js';
import { decodeTensorBytes } from '../onnx/tensor.js';
import { NodeExecutionError, UnsupportedOperatorError } from '../errors.js';
import { OnnxDataType } from '../onnx/index.js';
import { MlxSession } from '../session.js';
import { codecOf, resetImageCodecs } from './image-decoder.js';

type Format = 'RGB' | 'BGR' | 'Grayscale';

/** A suite case's encoded stream, where the shared suite is there. */
function suiteInput(name: string) {
  const file = join(sharedPath('onnx-node-tests/v1.22.0'), name, 'test_data_set_0', 'input_0.pb');
  return existsSync(file) ? decodeTensorBytes(readFileSync(file)) : undefined;
}

const decoderModel = (format: Format) =>
  model({
    opsets: { '': 20 },
    inputs: [v('data', 'uint8', ['n'])],
    outputs: [v('image', 'uint8')],
    nodes: [node('ImageDecoder', ['data'], ['image'], { attrs: { pixel_format: format } })],
  });

/** Through the onnxruntime-common API, as a user runs it. */
async function decode(bytes: Uint8Array, format: Format): Promise<{ dims: readonly number[]; data: Uint8Array }> {
  const s = await ort.InferenceSession.create(decoderModel(format), { executionProviders: ['mlx'] });
  try {
    const { image } = await s.run({ data: new ort.Tensor('uint8', bytes, [bytes.length]) });
    return { dims: image.dims, data: image.data as Uint8Array };
  } finally {
    await s.release();
  }
}

/** Deterministic pixels: `ch` samples per pixel. */
function pixels(w: number, h: number, ch: number, seed = 7): Uint8Array {
  const out = new Uint8Array(w * h * ch);
  let s = seed;
  for (let i = 0; i < out.length; i++) {
    s = (s * 1103515245 + 12345) >>> 0;
    out[i] = s >>> 24;
  }
  return out;
}

const ascii = (s: string) => new TextEncoder().encode(s);
const cat = (...parts: Uint8Array[]) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
};

/** Binary PPM (P6) or PGM (P5); maxval above 255 stores big-endian 16-bit samples. */
function pnm(w: number, h: number, samples: Uint8Array | Uint16Array, gray: boolean, maxval = 255): Uint8Array {
  const header = ascii(`${gray ? 'P5' : 'P6'}\n${w} ${h}\n${maxval}\n`);
  if (maxval < 256) return cat(header, Uint8Array.from(samples));
  const body = new Uint8Array(samples.length * 2);
  samples.forEach((x, i) => {
    body[2 * i] = x >> 8;
    body[2 * i + 1] = x & 0xff;
  });
  return cat(header, body);
}

/** A 24-bit BMP: bottom-up rows of B, G, R padded to 4 bytes. */
function bmp(w: number, h: number, rgb: Uint8Array): Uint8Array {
  const stride = Math.ceil((w * 3) / 4) * 4;
  const size = 54 + stride * h;
  const b = new Uint8Array(size);
  const dv = new DataView(b.buffer);
  b.set(ascii('BM'));
  dv.setUint32(2, size, true);
  dv.setUint32(10, 54, true);
  dv.setUint32(14, 40, true);
  dv.setInt32(18, w, true);
  dv.setInt32(22, h, true);
  dv.setUint16(26, 1, true);
  dv.setUint16(28, 24, true);
  dv.setUint32(34, stride * h, true);
  for (let y = 0; y < h; y++)
    for (let x = 0; x < w; x++) {
      const s = (y * w + x) * 3;
      const d = 54 + (h - 1 - y) * stride + x * 3;
      b[d] = rgb[s + 2];
      b[d + 1] = rgb[s + 1];
      b[d + 2] = rgb[s];
    }
  return b;
}

/** A PNG of 8-bit samples (colour type 0 gray, 2 RGB, 4 gray+alpha, 6 RGBA), filter 0 on every row. */
function png(w: number, h: number, samples: Uint8Array, colorType: 0 | 2 | 4 | 6): Uint8Array {
  const ch = { 0: 1, 2: 3, 4: 2, 6: 4 }[colorType];
  const chunk = (type: string, data: Uint8Array) => {
    const len = new Uint8Array(4);
    new DataView(len.buffer).setUint32(0, data.length);
    const td = cat(ascii(type), data);
    const crc = new Uint8Array(4);
    new DataView(crc.buffer).setUint32(0, crc32(td));
    return cat(len, td, crc);
  };
  const ihdr = new Uint8Array(13);
  const dv = new DataView(ihdr.buffer);
  dv.setUint32(0, w);
  dv.setUint32(4, h);
  ihdr.set([8, colorType, 0, 0, 0], 8);
  const raw = new Uint8Array(h * (1 + w * ch));
  for (let y = 0; y < h; y++) raw.set(samples.subarray(y * w * ch, (y + 1) * w * ch), y * (1 + w * ch) + 1);
  return cat(
    Uint8Array.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr),
    chunk('IDAT', deflateSync(raw)),
    chunk('IEND', new Uint8Array()),
  );
}

/** ITU-R 601-2 luma in float64, the definition Pillow's fixed-point conversion approximates. */
const luma = (r: number, g: number, b: number) => Math.round(0.299 * r + 0.587 * g + 0.114 * b);

function expectGray(have: Uint8Array, rgb: Uint8Array, stride = 3): void {
  const n = have.length;
  let worst = 0;
  for (let p = 0; p < n; p++) worst = Math.max(worst, Math.abs(have[p] - luma(rgb[p * stride], rgb[p * stride + 1], rgb[p * stride + 2])));
  expect(worst).toBeLessThanOrEqual(1);
}

const bgr = (rgb: Uint8Array) => rgb.map((_, i) => rgb[i - (i % 3) + 2 - (i % 3)]);

describe('ImageDecoder: lossless formats, pixels as encoded', () => {
  const [w, h] = [7, 5]; // odd sizes: BMP row padding, no block alignment
  const rgb = pixels(w, h, 3);

  it('PPM in RGB, BGR and Grayscale', async () => {
    const data = pnm(w, h, rgb, false);
    const r = await decode(data, 'RGB');
    expect(r.dims).toEqual([h, w, 3]);
    expect(Array.from(r.data)).toEqual(Array.from(rgb));
    expect(Array.from((await decode(data, 'BGR')).data)).toEqual(Array.from(bgr(rgb)));
    const g = await decode(data, 'Grayscale');
    expect(g.dims).toEqual([h, w, 1]);
    expectGray(g.data, rgb);
  });

  it('BMP (bottom-up, padded rows)', async () => {
    const r = await decode(bmp(w, h, rgb), 'RGB');
    expect(r.dims).toEqual([h, w, 3]);
    expect(Array.from(r.data)).toEqual(Array.from(rgb));
  });

  it('a gray image in RGB repeats the sample; in Grayscale it is itself', async () => {
    const gray = pixels(w, h, 1, 3);
    const r = await decode(pnm(w, h, gray, true), 'RGB');
    expect(r.dims).toEqual([h, w, 3]);
    expect(Array.from(r.data)).toEqual(Array.from(gray).flatMap((x) => [x, x, x]));
    const g = await decode(png(w, h, gray, 0), 'Grayscale');
    expect(Array.from(g.data)).toEqual(Array.from(gray));
  });

  it('PNG with alpha: the alpha channel is dropped, not composited', async () => {
    const rgba = pixels(w, h, 4, 11);
    const r = await decode(png(w, h, rgba, 6), 'RGB');
    expect(r.dims).toEqual([h, w, 3]);
    expect(Array.from(r.data)).toEqual(Array.from(rgba).filter((_, i) => i % 4 !== 3));
    expectGray((await decode(png(w, h, rgba, 6), 'Grayscale')).data, rgba, 4);
    const la = pixels(w, h, 2, 5);
    const g = await decode(png(w, h, la, 4), 'BGR');
    expect(Array.from(g.data)).toEqual(Array.from(la).flatMap((x, i) => (i % 2 ? [] : [x, x, x])));
  });

  it('16-bit samples scale to 8 bits (v * 255 / 65535, rounded)', async () => {
    const wide = Uint16Array.from(
      pixels(w, h, 6, 9).filter((_, i) => i % 2 === 0),
      (x, i) => x * 257 + (i % 200),
    );
    const r = await decode(pnm(w, h, wide, false, 65535), 'RGB');
    expect(Array.from(r.data)).toEqual(Array.from(wide, (x) => Math.round((x * 255) / 65535)));
  });
});

describe('ImageDecoder: JPEG and JPEG 2000 streams', () => {
  it('picks the codec from the signature', () => {
    expect(codecOf(Uint8Array.from([0xff, 0xd8, 0xff, 0xe0]))).toBe('jpeg');
    expect(codecOf(Uint8Array.from([0, 0, 0, 0x0c, 0x6a, 0x50, 0x20, 0x20, 0x0d, 0x0a, 0x87, 0x0a]))).toBe('jpeg2000');
    expect(codecOf(Uint8Array.from([0xff, 0x4f, 0xff, 0x51, 0]))).toBe('jpeg2000');
    expect(codecOf(ascii('P6\n'))).toBe('image');
  });

  it('a corrupt JPEG fails naming the node; the codec keeps working after it', async () => {
    const s = MlxSession.createSync(decoderModel('RGB'), {});
    try {
      const bad = Uint8Array.from([0xff, 0xd8, 0xff, 0xe0, 1, 2, 3, 4, 5]);
      expect(() => s.runSync({ data: { dtype: OnnxDataType.UINT8, dims: [bad.length], data: bad } })).toThrow(
        /ImageDecoder.*libjpeg-turbo could not decode the JPEG stream/,
      );
      const badJ2k = Uint8Array.from([0xff, 0x4f, 0xff, 0x51, 1, 2, 3]);
      expect(() => s.runSync({ data: { dtype: OnnxDataType.UINT8, dims: [badJ2k.length], data: badJ2k } })).toThrow(
        /OpenJPEG could not decode the JPEG 2000 stream/,
      );
      const good = pnm(2, 2, pixels(2, 2, 3), false);
      const out = s.runSync({ data: { dtype: OnnxDataType.UINT8, dims: [good.length], data: good } }).image;
      expect(out).toMatchObject({ dims: [2, 2, 3] });
    } finally {
      s.release();
    }
  });

  it('garbage, an empty stream and a truncated PNG fail with NodeExecutionError', async () => {
    const s = MlxSession.createSync(decoderModel('RGB'), {});
    try {
      const run = (d: Uint8Array) => () => s.runSync({ data: { dtype: OnnxDataType.UINT8, dims: [d.length], data: d } });
      expect(run(ascii('not an image at all'))).toThrow(NodeExecutionError);
      expect(run(new Uint8Array(0))).toThrow(/encoded_stream is empty/);
      const p = png(4, 4, pixels(4, 4, 3), 2);
      expect(run(p.subarray(0, p.length - 30))).toThrow(/could not be decoded/);
    } finally {
      s.release();
    }
  });
});

describe('ImageDecoder: the optional packages', () => {
  afterEach(() => resetImageCodecs());
  // A require that finds nothing, as in a project that installed none of the codec packages.
  const nowhere = (): NodeJS.Require[] => {
    const r = ((id: string) => {
      throw Object.assign(new Error(`Cannot find module '${id}'`), { code: 'MODULE_NOT_FOUND' });
    }) as unknown as NodeJS.Require;
    r.resolve = ((id: string) => r(id)) as NodeJS.RequireResolve;
    return [r];
  };

  it('with none installed, the node is not taken and the reason says what to install', () => {
    resetImageCodecs(nowhere());
    expect(() => MlxSession.createSync(decoderModel('RGB'), { fallback: 'none' })).toThrow(UnsupportedOperatorError);
    expect(() => MlxSession.createSync(decoderModel('RGB'), { fallback: 'none' })).toThrow(/npm install|@napi-rs\/image/);
  });

  it('with only the wasm codecs installed, the node is taken: JPEG decodes, PNG names its package', () => {
    // The real require, less @napi-rs/image. The cornerstone packages export no package.json.
    const real = createRequire(import.meta.url);
    const some = ((id: string) => {
      if (id.startsWith('@napi-rs/image')) throw Object.assign(new Error(`Cannot find module '${id}'`), { code: 'MODULE_NOT_FOUND' });
      return real(id);
    }) as unknown as NodeJS.Require;
    some.resolve = ((id: string) => {
      if (id.startsWith('@napi-rs/image')) throw Object.assign(new Error(`Cannot find module '${id}'`), { code: 'MODULE_NOT_FOUND' });
      return real.resolve(id);
    }) as NodeJS.RequireResolve;
    resetImageCodecs([some]);
    const s = MlxSession.createSync(decoderModel('Grayscale'), { fallback: 'none' });
    try {
      const jpeg = suiteInput('test_image_decoder_decode_jpeg_grayscale');
      if (jpeg) expect(s.runSync({ data: jpeg }).image).toMatchObject({ dims: [32, 32, 1] });
      const d = png(2, 2, pixels(2, 2, 3), 2);
      expect(() => s.runSync({ data: { dtype: OnnxDataType.UINT8, dims: [d.length], data: d } })).toThrow(/npm install @napi-rs\/image/);
    } finally {
      s.release();
    }
  });

  it('a format whose package is missing fails naming the package', () => {
    const s = MlxSession.createSync(decoderModel('RGB'), {});
    try {
      resetImageCodecs(nowhere());
      const d = pnm(2, 2, pixels(2, 2, 3), false);
      expect(() => s.runSync({ data: { dtype: OnnxDataType.UINT8, dims: [d.length], data: d } })).toThrow(
        /needs the optional package @napi-rs\/image \(npm install @napi-rs\/image\)/,
      );
    } finally {
      s.release();
    }
  });
});
