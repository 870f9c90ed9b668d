// com.microsoft MatMulNBits: Y = A · dequant(B)^T (+ bias), with B [N, k_blocks, blob] uint8
// quantized blockwise along K: w = (q - zero_point) · scale.
//
// MLX's affine quantization computes w = scale · q + bias, so bias = -scale · zero_point, and its
// packing is the same bit order as onnxruntime's: element i of a uint32 word sits at bits
// [i·bits, (i+1)·bits), i.e. the first element in the low bits of the first byte. A row of B's
// bytes read as little-endian uint32 words is therefore exactly MLX's packed row, and
// quantizedMatmul computes the product without materialising the weights. On the CPU,
// smallQuantizedMatmul runs the native 4-bit kernel for few rows (decoding) and dequantizes once
// for more (MLX's CPU quantized_matmul is a scalar loop); elsewhere it is quantizedMatmul.
//
// When B, scales and zero points are constants (the exported form) the packed operands are built
// once on the host and kept. Block sizes MLX has no kernel for (16; or any non-constant weights)
// dequantize with plain MLX ops instead; blocks above 128 map to groups of 128 with repeated scales.
import * as mx from '@mlx/core';
import { OnnxDataType, type HostTensor } from '../../onnx/index.js';
import type { Attrs } from '../../registry/attrs.js';
import type { CheckContext, OpContext, OpEntry } from '../../registry/types.js';
import { msOp, invalidNode } from '../../registry/op.js';
import { unpackFields } from '../helpers/quant-math.js';
import { numAt } from '../helpers/shape-host.js';
import { isResidentConstant } from '../../runtime/uploads.js';
import { MAX_DIM } from '../helpers/bounds.js';
import { sameDims } from '../helpers/util.js';

const MLX_GROUPS = new Set([32, 64, 128]);

interface Layout {
  K: number;
  N: number;
  bits: number;
  block: number;
  kBlocks: number;
  blob: number;
}

interface NBitsParams extends Layout {
  weightPrepacked: boolean;
}

function parseNBits(attrs: Attrs): NBitsParams {
  const K = attrs.int('K');
  const N = attrs.int('N');
  const bits = attrs.int('bits', 4);
  const block = attrs.int('block_size');
  // Values the contrib spec rules out make the node invalid (refused everywhere, never handed to
  // onnxruntime, whose kernel divides by some of them); bits 3, 5, 6, 7 are valid but not taken
  // here (check()). K and N size the weights, the scales and the result: a count MLX can hold
  // (onnxruntime refuses a negative one with a narrowing_error at initialization).
  for (const [name, n] of [
    ['K', K],
    ['N', N],
  ] as const)
    if (!Number.isSafeInteger(n) || n < 1 || n > MAX_DIM)
      throw invalidNode(`MatMulNBits attribute ${name} = ${n} is not a positive size (at most ${MAX_DIM})`);
  if (!(bits >= 2 && bits <= 8)) throw invalidNode(`MatMulNBits bits ${bits} is outside 2-8`);
  if (!(block >= 16 && (block & (block - 1)) === 0)) throw invalidNode(`MatMulNBits block_size ${block} is not a power of two >= 16`);
  const kBlocks = Math.ceil(K / block);
  return { K, N, bits, block, kBlocks, blob: (block * bits) / 8, weightPrepacked: attrs.int('weight_prepacked', 0) !== 0 };
}

function check(ctx: CheckContext<NBitsParams>): string | undefined {
  const { bits } = ctx.params;
  if (![2, 4, 8].includes(bits)) return `MatMulNBits with bits=${bits} is not supported (2, 4 and 8 are)`;
  if (ctx.node.inputs[4]) return 'MatMulNBits with g_idx (act-order group indices, deprecated) is not supported';
  if (ctx.params.weightPrepacked) return 'MatMulNBits with weight_prepacked (an execution-provider-specific layout) is not supported';
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// Host-side unpacking shared by both paths.

/** Zero point of every block, [N * kBlocks]: packed uint8 (low bits first, rows padded to a byte), float, or the default 2^(bits-1). */
function zeroPoints(zp: HostTensor | undefined, l: Layout): Float64Array {
  const out = new Float64Array(l.N * l.kBlocks);
  if (!zp) return out.fill(2 ** (l.bits - 1));
  if (zp.dtype !== OnnxDataType.UINT8) {
    for (let i = 0; i < out.length; i++) out[i] = numAt(zp, i);
    return out;
  }
  const bytes = zp.data as Uint8Array;
  const rowBytes = Math.ceil((l.kBlocks * l.bits) / 8);
  const mask = (1 << l.bits) - 1;
  for (let n = 0; n < l.N; n++) {
    for (let b = 0; b < l.kBlocks; b++) {
      const bit = b * l.bits;
      out[n * l.kBlocks + b] = (bytes[n * rowBytes + (bit >> 3)] >> (bit & 7)) & mask;
    }
  }
  return out;
}

/**
 * A host float array as a float32 MLX array (converted here, so nothing lazy is cached); `resident`
 * where it is kept for the session's life, as the session's constants are (huge pages on Linux's CPU build).
 */
const upload = (values: Float64Array, shape: number[], resident: boolean) =>
  mx.Array.fromTypedArray(Float32Array.from(values), shape, 'float32', { resident });

// ---------------------------------------------------------------------------------------------
// Fused path: MLX quantized matmul on operands packed once.

interface Packed {
  w: mx.Array;
  scales: mx.Array;
  biases: mx.Array;
  group: number;
  /** K padded to whole blocks. */
  kPadded: number;
  /** The scales' and zero points' keys (constantOf) the packing was made from. */
  sources: (object | undefined)[];
}

const packedCache = new WeakMap<object, Packed>();
const seenOnce = new WeakSet<object>();

function packOnHost(b: HostTensor, sc: HostTensor, zp: HostTensor | undefined, l: Layout, keep: boolean): Packed {
  const hold = (a: mx.Array) => (keep ? mx.persist(a) : a);
  const group = Math.min(l.block, 128);
  const repeat = l.block / group;
  const zps = zeroPoints(zp, l);
  const groups = l.kBlocks * repeat;
  const scales = new Float64Array(l.N * groups);
  const biases = new Float64Array(l.N * groups);
  for (let i = 0; i < l.N * l.kBlocks; i++) {
    const s = numAt(sc, i);
    for (let r = 0; r < repeat; r++) {
      scales[i * repeat + r] = s;
      biases[i * repeat + r] = -s * zps[i];
    }
  }
  // Copy so the words start on a 4-byte boundary whatever B's view offset was.
  const bytes = new Uint8Array(b.data as Uint8Array);
  const words = new Uint32Array(bytes.buffer, 0, bytes.length / 4);
  const w = hold(mx.Array.fromTypedArray(words, [l.N, (l.kBlocks * l.blob) / 4], 'uint32', { resident: keep }));
  return {
    w,
    group,
    kPadded: l.kBlocks * l.block,
    sources: [sc, zp],
    scales: hold(upload(scales, [l.N, groups], keep)),
    biases: hold(upload(biases, [l.N, groups], keep)),
  };
}

/**
 * A constant input: a host tensor, or a constant the session made resident on MLX (initializers of
 * 64 KiB and more), read back once (`read`). `key` identifies it across runs.
 */
function constantOf(ctx: OpContext, i: number): { key: object; resident: boolean; read: () => HostTensor } | undefined {
  const h = ctx.hostIfKnown(i);
  if (h) return { key: h, resident: false, read: () => h };
  const v = ctx.value(i);
  if (v.kind !== 'device' || !isResidentConstant(v.array)) return undefined;
  return { key: v.array, resident: true, read: () => ctx.host(i) };
}

/** The packed operands (float32 scales and biases) when B, scales and zero points are constants and MLX has a kernel for the layout. */
function packed(ctx: OpContext, l: Layout): Packed | undefined {
  const b = constantOf(ctx, 1);
  const sc = constantOf(ctx, 2);
  const zp = ctx.has(3) ? constantOf(ctx, 3) : undefined;
  if (!b || !sc || (ctx.has(3) && !zp)) return undefined;
  if (!MLX_GROUPS.has(Math.min(l.block, 128))) return undefined;
  const p = packedCache.get(b.key);
  if (p && p.sources[0] === sc.key && p.sources[1] === zp?.key) return p;
  // Keep (and cache) what a second run sees again: initializers are the same host tensors (or
  // resident arrays) every run, feeds are new ones, whose packing then lives only as long as the run.
  const keep = b.resident || seenOnce.has(b.key);
  seenOnce.add(b.key);
  const fresh = packOnHost(b.read(), sc.read(), zp?.read(), l, keep);
  fresh.sources = [sc.key, zp?.key];
  if (keep) packedCache.set(b.key, fresh);
  return fresh;
}

function padK(a: mx.Array, k: number, kPadded: number): mx.Array {
  if (k === kPadded) return a;
  return mx.pad(a, [a.ndim - 1], [0], [kPadded - k], 0, 'constant');
}

// ---------------------------------------------------------------------------------------------
// Reference path: dequantize with MLX ops, then a plain matmul.

function dequantized(ctx: OpContext, l: Layout, dtype: mx.Dtype): mx.Array {
  const q = mx.astype(unpackFields(mx.reshape(ctx.input(1), [l.N, l.kBlocks, l.blob]), l.bits), dtype); // [N, kb, block]
  const scales = mx.reshape(mx.astype(ctx.input(2), dtype), [l.N, l.kBlocks, 1]);
  let zp: mx.Array;
  if (!ctx.has(3)) zp = mx.full([1], 2 ** (l.bits - 1), dtype);
  else if (ctx.elemType(3) === OnnxDataType.UINT8) {
    const rowBytes = Math.ceil((l.kBlocks * l.bits) / 8);
    const fields = unpackFields(mx.reshape(ctx.input(3), [l.N, rowBytes]), l.bits);
    zp = mx.reshape(mx.astype(mx.slice(fields, [0, 0], [l.N, l.kBlocks], [1, 1]), dtype), [l.N, l.kBlocks, 1]);
  } else zp = mx.reshape(mx.astype(ctx.input(3), dtype), [l.N, l.kBlocks, 1]);
  const w = mx.reshape(mx.multiply(mx.subtract(q, zp), scales), [l.N, l.kBlocks * l.block]);
  return l.K === l.kBlocks * l.block ? w : mx.slice(w, [0, 0], [l.N, l.K], [1, 1]);
}

/** Nodes translated on each path since the process started (for tests: which path a model takes). */
export const matMulNBitsPaths = { packed: 0, dequantized: 0 };

const dimsText = (d: readonly number[]) => `{${d.join(',')}}`;

/**
 * The shapes of B, scales, zero points and bias against the attributes, as onnxruntime checks
 * them (its messages): B [N, k_blocks, blob]; scales [N · k_blocks] or [N, k_blocks]; zero points
 * the same, or [N · zp_blob] / [N, zp_blob] packed uint8; bias [N]; and A's last axis K. Sizes
 * that disagree would read past the weights (wrong rows or NaN) or leave rows unscaled.
 */
function checkShapes(ctx: OpContext<NBitsParams>): void {
  const l = ctx.params;
  const either = (i: number, what: string, per: number) => {
    const d = ctx.shape(i);
    if (!sameDims(d, [l.N * per]) && !sameDims(d, [l.N, per]))
      throw new RangeError(`${what} shape ${dimsText(d)} does not match attribute-derived shape [${l.N * per}] or [${l.N},${per}]`);
  };
  const a = ctx.shape(0);
  if (a.length < 1 || a[a.length - 1] !== l.K) throw new RangeError(`input A of shape ${dimsText(a)} does not end in K = ${l.K}`);
  const b = ctx.shape(1);
  if (!sameDims(b, [l.N, l.kBlocks, l.blob]))
    throw new RangeError(`B shape ${dimsText(b)} does not match attribute-derived shape [${l.N},${l.kBlocks},${l.blob}]`);
  either(2, 'scales', l.kBlocks);
  if (ctx.has(3)) {
    if (ctx.elemType(3) === OnnxDataType.UINT8) either(3, 'zero_points', Math.ceil((l.kBlocks * l.bits) / 8));
    else {
      if (ctx.elemType(3) !== ctx.elemType(2))
        throw new RangeError("Input 'zero_points' and 'scales' should have the same data type when zero_points is not uint8");
      either(3, 'zero_points', l.kBlocks);
    }
  }
  if (ctx.has(5) && !sameDims(ctx.shape(5), [l.N]))
    throw new RangeError(`bias shape ${dimsText(ctx.shape(5))} does not match attribute-derived shape [${l.N}]`);
}

function run(ctx: OpContext<NBitsParams>): mx.Array[] {
  const a = ctx.input(0);
  const l = ctx.params;
  checkShapes(ctx);
  // No rows (A of shape [..., 0, K]): an empty [..., 0, N], as onnxruntime returns it; MLX's
  // quantized kernels divide by the row count.
  if (a.size === 0) {
    const y = mx.zeros([...a.shape.slice(0, -1), l.N], a.dtype);
    const bias = ctx.optional(5);
    return [bias ? mx.add(y, bias) : y];
  }
  // The affine form adds bias · Σx per group, and bias = -scale · zero_point is as large as the
  // weights' offset: in half precision its rounding alone costs ~1e-2 of a 64-term product, where
  // onnxruntime's (q - zp) · scale rounds each weight once. So the fused path runs in float32.
  const p = packed(ctx, l);
  matMulNBitsPaths[p ? 'packed' : 'dequantized']++;
  let y = p
    ? mx.astype(
        mx.ext.smallQuantizedMatmul(padK(mx.astype(a, 'float32'), l.K, p.kPadded), p.w, p.scales, p.biases, true, p.group, l.bits),
        a.dtype,
      )
    : mx.matmul(a, mx.transpose(dequantized(ctx, l, a.dtype)));
  const bias = ctx.optional(5);
  if (bias) y = mx.add(y, bias);
  return [y];
}

export const matMulNBitsOps: OpEntry[] = [
  msOp('MatMulNBits', 1, {
    parse: parseNBits,
    check,
    run,
    note: 'bits 2/4/8; MLX quantized matmul for constant weights with block 32-128 (larger blocks as groups of 128), dequantize + matmul otherwise; g_idx unsupported',
  }),
];
