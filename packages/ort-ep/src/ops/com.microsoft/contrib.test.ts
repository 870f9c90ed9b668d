// com.microsoft ops against onnxruntime-node's CPU provider (which implements them), one tiny
// model per case; MatMulNBits also against a plain-JS dequantization.
import { describe, expect, it } from 'vitest';
import { float16BitsToNumber } from '@mlx/core';
import { model, node, toHalfBits, v, type ElemName, type NodeSpec, type TensorSpec } from '../../../test/helpers/build.js';
import {
  expectSameAsOrt,
  f32,
  i64,
  ort,
  plain,
  runOn,
  seeded,
  type Feeds,
  type OrtTensor,
  randomF32 as rand,
} from '../../../test/helpers/ort.js';
import { matMulNBitsPaths } from './nbits.js';

const MS = 'com.microsoft';
const tol = { rtol: 1e-4, atol: 1e-5 };

interface Case {
  op: string;
  domain?: string;
  feeds: Record<string, OrtTensor>;
  inits?: TensorSpec[];
  inputs: string[]; // node input names ('' for omitted)
  outputs: string[];
  outTypes?: ElemName[];
  attrs?: NodeSpec['attrs'];
  opset?: number;
}

function build(c: Case): Uint8Array {
  return model({
    opsets: { '': c.opset ?? 17, [MS]: 1 },
    inputs: Object.entries(c.feeds).map(([name, t]) => v(name, t.type as ElemName, [...t.dims])),
    outputs: c.outputs.filter((o) => o).map((o, i) => v(o, c.outTypes?.[i] ?? 'float32')),
    initializers: c.inits,
    nodes: [node(c.op, c.inputs, c.outputs, { domain: c.domain ?? MS, attrs: c.attrs })],
  });
}

const same = (c: Case, t = tol) => expectSameAsOrt(build(c), c.feeds, t);

describe('GELU family and BiasAdd', () => {
  const x = rand([2, 3, 8], 1, 3);
  const b = rand([8], 2);
  it('Gelu', () => same({ op: 'Gelu', feeds: { x }, inputs: ['x'], outputs: ['y'] }));
  it('BiasGelu', () => same({ op: 'BiasGelu', feeds: { x, b }, inputs: ['x', 'b'], outputs: ['y'] }));
  it('FastGelu with and without bias', async () => {
    await same({ op: 'FastGelu', feeds: { x, b }, inputs: ['x', 'b'], outputs: ['y'] });
    await same({ op: 'FastGelu', feeds: { x }, inputs: ['x'], outputs: ['y'] });
  });
  it('QuickGelu, default and explicit alpha', async () => {
    await same({ op: 'QuickGelu', feeds: { x }, inputs: ['x'], outputs: ['y'] });
    await same({ op: 'QuickGelu', feeds: { x }, inputs: ['x'], outputs: ['y'], attrs: { alpha: 1.5 } });
  });
  // onnxruntime implements BiasAdd on CUDA only: a plain sum is the reference.
  it('BiasAdd', async () => {
    const s = rand([2, 3, 8], 3);
    const y = plain(
      (await runOn('mlx', build({ op: 'BiasAdd', feeds: { x, b, s }, inputs: ['x', 'b', 's'], outputs: ['y'] }), { x, b, s })).y,
    );
    const [xv, bv, sv] = [plain(x), plain(b), plain(s)];
    expect(y.map((t, i) => Math.abs(t - (xv[i] + bv[i % 8] + sv[i])) < 1e-6).every(Boolean)).toBe(true);
  });
});

describe('fused normalisations', () => {
  const x = rand([2, 3, 16], 4, 2);
  const skip = rand([2, 3, 16], 5);
  const gamma = rand([16], 6);
  const beta = rand([16], 7);
  const bias = rand([16], 8);
  it('SkipLayerNormalization with beta, bias and the residual sum', () =>
    same({
      op: 'SkipLayerNormalization',
      feeds: { x, skip, gamma, beta, bias },
      inputs: ['x', 'skip', 'gamma', 'beta', 'bias'],
      outputs: ['y', '', '', 'sum'],
      attrs: { epsilon: 1e-5 },
    }));
  it('SkipLayerNormalization without beta and bias, 2-D skip broadcast over the batch', () =>
    same({ op: 'SkipLayerNormalization', feeds: { x, skip: rand([3, 16], 9), gamma }, inputs: ['x', 'skip', 'gamma'], outputs: ['y'] }));
  it('SkipSimplifiedLayerNormalization with bias and the residual sum', () =>
    same({
      op: 'SkipSimplifiedLayerNormalization',
      feeds: { x, skip, gamma, bias },
      inputs: ['x', 'skip', 'gamma', 'bias'],
      outputs: ['y', '', '', 'sum'],
      attrs: { epsilon: 1e-6 },
    }));
  it('SkipSimplifiedLayerNormalization without bias', () =>
    same({ op: 'SkipSimplifiedLayerNormalization', feeds: { x, skip, gamma }, inputs: ['x', 'skip', 'gamma'], outputs: ['y'] }));
  it('SimplifiedLayerNormalization (ONNX domain) with inv_std_var', () =>
    same({
      op: 'SimplifiedLayerNormalization',
      domain: '',
      feeds: { x, gamma },
      inputs: ['x', 'gamma'],
      outputs: ['y', 'inv'],
      attrs: { epsilon: 1e-6 },
    }));
  it('LayerNormalization at opset 13 (onnxruntime, ONNX domain) over two axes with Mean and InvStdDev', () =>
    same({
      op: 'LayerNormalization',
      domain: '',
      opset: 13,
      feeds: { x, g: rand([3, 16], 10), b: rand([3, 16], 11) },
      inputs: ['x', 'g', 'b'],
      outputs: ['y', 'mean', 'inv'],
      attrs: { axis: 1 },
    }));
});

describe('EmbedLayerNormalization', () => {
  const i32 = (d: number[], dims: number[]) => new ort.Tensor('int32', Int32Array.from(d), dims);
  const ids = i32([1, 5, 7, 2, 0, 3, 3, 9], [2, 4]);
  const seg = i32([0, 0, 1, 1, 0, 1, 1, 1], [2, 4]);
  const tables = { word: rand([10, 16], 20), pos: rand([8, 16], 21), segt: rand([2, 16], 22), gamma: rand([16], 23), beta: rand([16], 24) };
  const outTypes: ElemName[] = ['float32', 'int32', 'float32'];
  it('with segments, mask and every output', () =>
    same({
      op: 'EmbedLayerNormalization',
      feeds: { ids, seg, ...tables, mask: i32([1, 1, 1, 0, 1, 1, 0, 0], [2, 4]) },
      inputs: ['ids', 'seg', 'word', 'pos', 'segt', 'gamma', 'beta', 'mask'],
      outputs: ['y', 'mi', 'sum'],
      outTypes,
      attrs: { epsilon: 1e-5 },
    }));
  it('without segments or mask, with position_ids', () =>
    same({
      op: 'EmbedLayerNormalization',
      feeds: { ids, word: tables.word, pos: tables.pos, gamma: tables.gamma, beta: tables.beta, pid: i32([3, 2, 1, 0], [1, 4]) },
      inputs: ['ids', '', 'word', 'pos', '', 'gamma', 'beta', '', 'pid'],
      outputs: ['y', 'mi'],
      outTypes,
    }));
});

describe('FusedMatMul', () => {
  it('transA, transB, alpha, batched', async () => {
    await same({
      op: 'FusedMatMul',
      feeds: { a: rand([2, 4, 3], 12), b: rand([2, 4, 5], 13) },
      inputs: ['a', 'b'],
      outputs: ['y'],
      attrs: { transA: 1, alpha: 0.5 },
    });
    await same({
      op: 'FusedMatMul',
      feeds: { a: rand([2, 3, 4], 14), b: rand([5, 4], 15) },
      inputs: ['a', 'b'],
      outputs: ['y'],
      attrs: { transB: 1 },
    });
  });
});

describe('RotaryEmbedding', () => {
  const maxPos = 16;
  const caches = (half: number) => {
    const cos: number[] = [];
    const sin: number[] = [];
    for (let p = 0; p < maxPos; p++)
      for (let i = 0; i < half; i++) {
        const a = p / 10000 ** ((2 * i) / (2 * half));
        cos.push(Math.cos(a));
        sin.push(Math.sin(a));
      }
    return { cos: f32(cos, [maxPos, half]), sin: f32(sin, [maxPos, half]) };
  };
  const pos = i64([1, 2, 3, 4, 3, 5, 7, 9], [2, 4]);
  for (const interleaved of [0, 1]) {
    it(`3-D input with num_heads, interleaved=${interleaved}`, () =>
      same({
        op: 'RotaryEmbedding',
        feeds: { x: rand([2, 4, 16], 16), pos, ...caches(4) },
        inputs: ['x', 'pos', 'cos', 'sin'],
        outputs: ['y'],
        attrs: { interleaved, num_heads: 2 },
      }));
    it(`4-D input (BNSH), interleaved=${interleaved}`, () =>
      same({
        op: 'RotaryEmbedding',
        feeds: { x: rand([2, 3, 4, 8], 17), pos, ...caches(4) },
        inputs: ['x', 'pos', 'cos', 'sin'],
        outputs: ['y'],
        attrs: { interleaved },
      }));
  }
  it('position offset [1] and a partial rotary_embedding_dim', () =>
    same({
      op: 'RotaryEmbedding',
      feeds: { x: rand([1, 4, 32], 18), pos: i64([3], [1]), ...caches(4) },
      inputs: ['x', 'pos', 'cos', 'sin'],
      outputs: ['y'],
      attrs: { num_heads: 2, rotary_embedding_dim: 8 },
    }));
});

// ---------------------------------------------------------------------------------------------
// MatMulNBits

interface NBits {
  K: number;
  N: number;
  bits: number;
  block: number;
  zp: 'packed' | 'float' | 'none';
  bias?: boolean;
  constB?: boolean;
  M?: number;
  half?: boolean;
}

/** Random quantized operands in MatMulNBits' layout. */
function quantized(p: NBits, seed: number) {
  const kb = Math.ceil(p.K / p.block);
  const blob = (p.block * p.bits) / 8;
  const levels = 2 ** p.bits;
  const q = seeded(p.N * kb * p.block, seed).map((r) => Math.floor(((r + 1) / 2) * levels) % levels);
  const bytes = new Uint8Array(p.N * kb * blob);
  q.forEach((x, i) => {
    const bit = (i % p.block) * p.bits;
    const row = Math.floor(i / p.block);
    bytes[row * blob + (bit >> 3)] |= x << (bit & 7);
  });
  const scales = seeded(p.N * kb, seed + 1).map((r) => 0.01 + Math.abs(r) * 0.05);
  const zps = seeded(p.N * kb, seed + 2).map((r) => Math.floor(((r + 1) / 2) * levels) % levels);
  const rowBytes = Math.ceil((kb * p.bits) / 8);
  return { q, bytes, scales, zps, kb, blob, rowBytes };
}

/** Plain float64 dequantization and product: the reference both engines are held to. */
function reference(p: NBits, a: number[], qz: ReturnType<typeof quantized>, biasV?: number[]): number[] {
  const M = a.length / p.K;
  const out: number[] = [];
  for (let m = 0; m < M; m++)
    for (let n = 0; n < p.N; n++) {
      let acc = biasV ? biasV[n] : 0;
      for (let k = 0; k < p.K; k++) {
        const blk = n * qz.kb + Math.floor(k / p.block);
        const zp = p.zp === 'none' ? 2 ** (p.bits - 1) : qz.zps[blk];
        acc += a[m * p.K + k] * (qz.q[blk * p.block + (k % p.block)] - zp) * qz.scales[blk];
      }
      out.push(acc);
    }
  return out;
}

async function nbitsCase(p: NBits, seed: number): Promise<void> {
  const qz = quantized(p, seed);
  const M = p.M ?? 3;
  const a = seeded(M * p.K, seed + 3);
  const biasV = p.bias ? seeded(p.N, seed + 4) : undefined;
  const ft = p.half ? 'float16' : 'float32';
  const inits: TensorSpec[] = [{ name: 's', type: ft, dims: [p.N, qz.kb], values: qz.scales }];
  const feeds: Feeds = { a: p.half ? new ort.Tensor('float16', Uint16Array.from(a, toHalfBits), [1, M, p.K]) : f32(a, [1, M, p.K]) };
  const bDims = [p.N, qz.kb, qz.blob];
  if (p.constB === false) feeds.b = new ort.Tensor('uint8', qz.bytes, bDims);
  else inits.push({ name: 'b', type: 'uint8', dims: bDims, raw: qz.bytes });
  if (p.zp === 'packed') inits.push({ name: 'zp', type: 'uint8', dims: [p.N, qz.rowBytes], raw: zpPackedOf(p, qz) });
  if (p.zp === 'float') inits.push({ name: 'zp', type: ft, dims: [p.N, qz.kb], values: qz.zps });
  if (biasV) inits.push({ name: 'bias', type: ft, dims: [p.N], values: biasV });
  const inputs = ['a', 'b', 's', p.zp === 'none' ? '' : 'zp', '', biasV ? 'bias' : ''];
  while (inputs.at(-1) === '') inputs.pop();
  const bytes = build({
    op: 'MatMulNBits',
    feeds,
    inits,
    inputs,
    outputs: ['y'],
    outTypes: [ft],
    attrs: { K: p.K, N: p.N, bits: p.bits, block_size: p.block },
  });
  // float16 operands: the reference sees the same rounded inputs, and the product is rounded once more.
  const r16 = (x: number) => (p.half ? float16BitsToNumber(toHalfBits(x)) : x);
  const want = reference(p, a.map(r16), { ...qz, scales: qz.scales.map(r16) }, biasV?.map(r16));
  const t = p.half ? 2e-3 : 1e-4;
  const values = (y: OrtTensor) => (p.half ? Array.from(y.data as Uint16Array, float16BitsToNumber) : plain(y));
  const close = (y: OrtTensor) => values(y).findIndex((x, i) => !(Math.abs(x - want[i]) <= t + t * Math.abs(want[i])));
  // Three runs of one session: the first packs per run, the second packs and keeps, the third reuses.
  const session = await ort.InferenceSession.create(bytes, { executionProviders: ['mlx'] });
  try {
    for (let run = 0; run < 3; run++) expect(close((await session.run(feeds)).y)).toBe(-1);
  } finally {
    await session.release();
  }
  expect(close((await runOn('cpu', bytes, feeds)).y)).toBe(-1);
}

function zpPackedOf(p: NBits, qz: ReturnType<typeof quantized>): Uint8Array {
  const out = new Uint8Array(p.N * qz.rowBytes);
  qz.zps.forEach((z, i) => {
    const n = Math.floor(i / qz.kb);
    const bit = (i % qz.kb) * p.bits;
    out[n * qz.rowBytes + (bit >> 3)] |= z << (bit & 7);
  });
  return out;
}

describe('MatMulNBits', () => {
  const cases: [string, NBits][] = [
    ['4 bits, block 32, packed zero points (the exported form)', { K: 64, N: 24, bits: 4, block: 32, zp: 'packed' }],
    ['4 bits, block 32, odd number of blocks per row (zero points padded to a byte)', { K: 96, N: 8, bits: 4, block: 32, zp: 'packed' }],
    ['4 bits, no zero points (default 8)', { K: 64, N: 16, bits: 4, block: 32, zp: 'none' }],
    ['4 bits, float zero points, bias', { K: 128, N: 8, bits: 4, block: 64, zp: 'float', bias: true }],
    ['4 bits, block 128', { K: 256, N: 8, bits: 4, block: 128, zp: 'packed' }],
    ['4 bits, block 256 (groups of 128 with repeated scales)', { K: 512, N: 4, bits: 4, block: 256, zp: 'packed' }],
    ['4 bits, K not a multiple of the block', { K: 40, N: 8, bits: 4, block: 32, zp: 'packed' }],
    ['4 bits, block 16 (dequantize path)', { K: 64, N: 8, bits: 4, block: 16, zp: 'packed' }],
    ['4 bits, weights fed at run time (dequantize path)', { K: 64, N: 8, bits: 4, block: 32, zp: 'packed', constB: false }],
    ['8 bits, block 32', { K: 64, N: 8, bits: 8, block: 32, zp: 'packed' }],
    ['8 bits, no zero points (default 128)', { K: 64, N: 8, bits: 8, block: 32, zp: 'none' }],
    ['2 bits, block 32', { K: 64, N: 8, bits: 2, block: 32, zp: 'packed' }],
    ['single row (decode step)', { K: 64, N: 32, bits: 4, block: 32, zp: 'packed', M: 1 }],
    ['float16 activations and scales', { K: 64, N: 16, bits: 4, block: 32, zp: 'packed', half: true, bias: true }],
    ['float16, block 16 (dequantize path)', { K: 64, N: 8, bits: 4, block: 16, zp: 'float', half: true }],
  ];
  cases.forEach(([name, p], i) => it(name, () => nbitsCase(p, 100 + i * 10)));

  it('weights and scales of 64 KiB and more (held by MLX only) still take the packed path', async () => {
    // B [1024, 16, 16] is 256 KiB and the scales 64 KiB: the session makes both resident on MLX
    // (makeConstantsResident), so the node sees device arrays, not host tensors.
    const before = { ...matMulNBitsPaths };
    await nbitsCase({ K: 512, N: 1024, bits: 4, block: 32, zp: 'packed', M: 1 }, 900);
    expect(matMulNBitsPaths.dequantized).toBe(before.dequantized);
    expect(matMulNBitsPaths.packed).toBeGreaterThan(before.packed);
  });

  it('refuses g_idx', async () => {
    const p: NBits = { K: 32, N: 4, bits: 4, block: 32, zp: 'none' };
    const qz = quantized(p, 7);
    const bytes = build({
      op: 'MatMulNBits',
      feeds: { a: rand([1, 32], 1) },
      inputs: ['a', 'b', 's', '', 'g'],
      outputs: ['y'],
      attrs: { K: 32, N: 4, bits: 4, block_size: 32 },
      inits: [
        { name: 'b', type: 'uint8', dims: [4, 1, 16], raw: qz.bytes },
        { name: 's', type: 'float32', dims: [4, 1], values: qz.scales },
        { name: 'g', type: 'int32', dims: [32], values: Array.from({ length: 32 }, () => 0) },
      ],
    });
    await expect(runOn('mlx', bytes, { a: rand([1, 32], 1) })).rejects.toThrow(/g_idx/);
  });
});

// onnxruntime registers Sigmoid and SimplifiedLayerNormalization only in the ONNX domain: the
// com.microsoft spellings run on MLX against onnxruntime running the ONNX-domain node.
describe('com.microsoft spellings of ONNX-domain ops', () => {
  const x = rand([2, 3, 16], 30, 4);
  const gamma = rand([16], 31);
  async function sameAsOnnxDomain(c: Case) {
    const have = await runOn('mlx', build(c), c.feeds);
    const want = await runOn('cpu', build({ ...c, domain: '' }), c.feeds);
    for (const name of Object.keys(want)) {
      const [a, b] = [plain(have[name]), plain(want[name])];
      expect(a.length).toBe(b.length);
      const bad = a.findIndex((v, i) => !(Math.abs(v - b[i]) <= tol.atol + tol.rtol * Math.abs(b[i])));
      expect(bad === -1 ? 'ok' : `${name}[${bad}]: mlx ${a[bad]} vs onnxruntime ${b[bad]}`).toBe('ok');
    }
  }
  it('Sigmoid', () => sameAsOnnxDomain({ op: 'Sigmoid', feeds: { x }, inputs: ['x'], outputs: ['y'] }));
  it('SimplifiedLayerNormalization with inv_std_var, over the last two axes', () =>
    sameAsOnnxDomain({
      op: 'SimplifiedLayerNormalization',
      feeds: { x, g: rand([3, 16], 32) },
      inputs: ['x', 'g'],
      outputs: ['y', 'inv'],
      attrs: { epsilon: 1e-6, axis: -2 },
    }));
  it('SimplifiedLayerNormalization, default axis', () =>
    sameAsOnnxDomain({ op: 'SimplifiedLayerNormalization', feeds: { x, gamma }, inputs: ['x', 'gamma'], outputs: ['y'] }));
});

describe('GatedAdd and GatedRMSNorm (gated DeltaNet outputs)', () => {
  const x = rand([2, 3, 16], 40, 2);
  it('GatedAdd: a per-row gate', () =>
    same({ op: 'GatedAdd', feeds: { x, y: rand([2, 3, 16], 41), g: rand([2, 3, 1], 42) }, inputs: ['x', 'y', 'g'], outputs: ['o'] }));
  it('GatedRMSNorm over groups of the last axis, default and explicit epsilon', async () => {
    const feeds = { x, s: rand([4], 43), g: rand([2, 3, 16], 44, 3) };
    await same({ op: 'GatedRMSNorm', feeds, inputs: ['x', 's', 'g'], outputs: ['y'] });
    await same({
      op: 'GatedRMSNorm',
      feeds: { ...feeds, s: rand([16], 45) },
      inputs: ['x', 's', 'g'],
      outputs: ['y'],
      attrs: { epsilon: 1e-3 },
    });
  });
});
