// com.microsoft QMoE: a mixture of experts whose FC1 and FC2 weights are 2/4/8-bit integers,
// row-wise or block-wise along K, w = (q - zero_point) · scale (zero point 2^(bits-1) when none is
// given). Each token goes to the k experts of its largest router logits, weighted by the softmax of
// those k logits (or by router_weights at them, summed to one with normalize_routing_weights):
//   y[t] = Σ_j w[t, j] · FC2_e(act(FC1_e(x[t]))),  e = the j-th expert of token t,
// FC(x) = x · dequant(W)^T + bias, W stored [E, N, K / (8 / bits)] (MatMulNBits' layout per expert).
// onnxruntime's CPU kernel is the behavioural reference (measured against onnxruntime-node 1.30):
// gelu is the tanh approximation; SwiGLU is interleaved (swiglu_fusion 1: g at even columns, l at
// odd ones; 2: g then l), G = min(g, limit), L = clamp(l, ±limit), act = G · sigmoid(alpha · G) ·
// (L + beta), with alpha 1, beta 0 and no limit unless the attributes say otherwise.
//
// Float experts (quant_type 'fp8', 'fp4', 'nvfp4'), per expert e with its global scale g[e]
// (fc*_global_scale, required):
//  - fp8: W = e4m3fn(W) · g[e], weights float8e4m3fn [E, N, K]; fc*_scales are not used;
//  - fp4 (MXFP4): W = e2m1(W) · 2^(s - 127) · g[e], two values a byte (low nibble first), s the
//    float8e8m0 block scales [E, N, K / 32] (block_size is 32 whatever the attribute says);
//  - nvfp4: the same with float8e4m3fn block scales over blocks of 16.
// 'wfp4afp8' (FP8 activations) and the activation-scale inputs are declined.
//
// Separate FC3 weights (integer experts; onnxruntime's CPU kernel has none: "FC3 gating is not yet
// implemented on CPU"): FC3 is the linear branch of a gated FFN, act(FC1(x)) · FC3(x) (Mixtral's
// w1 / w3), and with SwiGLU unfused (swiglu_fusion 0) g = FC1(x), l = FC3(x) in the formula above.
// use_sparse_mixer is declined: onnxruntime's CPU kernel takes it at k = 2 and routes as without
// it, its CUDA kernel routes with PhiMoE's SparseMixer; the fallback gives onnxruntime's result.
//
// MLX: the experts' weights are dequantized to float32 (all experts, every run), then each
// (token, chosen expert) pair is one row of gather_mm over the expert axis, so only the chosen
// experts' products are computed.
import * as mx from '@mlx/core';
import { gelu, silu, swiglu } from '@mlx/kernels';
import { OnnxDataType } from '../../onnx/index.js';
import type { Attrs } from '../../registry/attrs.js';
import type { CheckContext, OpContext, OpEntry } from '../../registry/types.js';
import { msOp, invalidNode } from '../../registry/op.js';
import { decodeE8M0Array, decodeMiniFloatArray } from '../helpers/minifloat.js';
import { unpackFields } from '../helpers/quant-math.js';

type Activation = 'relu' | 'gelu' | 'silu' | 'identity' | 'swiglu';

interface QMoEParams {
  k: number;
  bits: number;
  /** 0: row-wise scales (one per output row of each expert). */
  block: number;
  activation: Activation;
  normalize: boolean;
  fusion: number;
  alpha: number;
  beta: number;
  limit: number;
  quantType: string;
  sparseMixer: boolean;
  prepacked: number;
}

const FLOAT_QUANTS = ['fp8', 'fp4', 'nvfp4'];

/** Values per byte of the expert weights. */
const perByte = (p: QMoEParams): number => (p.quantType === 'fp8' ? 1 : p.quantType === 'int' ? 8 / p.bits : 2);

function parse(a: Attrs): QMoEParams {
  const activation = a.string('activation_type', 'relu') as Activation;
  if (!['relu', 'gelu', 'silu', 'identity', 'swiglu'].includes(activation))
    throw new RangeError(`activation_type '${activation}' is not one of relu, gelu, silu, identity, swiglu`);
  const k = a.int('k', 1);
  if (!(k >= 1)) throw new RangeError(`k must be >= 1, got ${k}`);
  const bits = a.int('expert_weight_bits', 4);
  if (![2, 4, 8].includes(bits)) throw invalidNode(`expert_weight_bits must be 2, 4 or 8, got ${bits}`);
  const quantType = a.string('quant_type', 'int');
  let block = a.int('block_size', 0);
  if (quantType === 'fp4') block = 32;
  else if (quantType === 'nvfp4') block = 16;
  else if (quantType === 'fp8') block = 0;
  if (block !== 0 && !(block >= 16 && (block & (block - 1)) === 0))
    throw invalidNode(`block_size must be a power of two >= 16, got ${block}`);
  return {
    k,
    bits,
    block,
    activation,
    normalize: a.int('normalize_routing_weights', 0) === 1,
    fusion: a.int('swiglu_fusion', 0),
    alpha: a.float('activation_alpha', 1),
    beta: a.float('activation_beta', 0),
    limit: a.float('swiglu_limit', Number.POSITIVE_INFINITY),
    quantType,
    sparseMixer: a.int('use_sparse_mixer', 0) === 1,
    prepacked: a.int('weights_prepacked', -1),
  };
}

const FLOATS = [OnnxDataType.FLOAT, OnnxDataType.FLOAT16, OnnxDataType.BFLOAT16];

function check(ctx: CheckContext<QMoEParams>): string | undefined {
  const p = ctx.params;
  if (p.quantType !== 'int' && !FLOAT_QUANTS.includes(p.quantType))
    return `quant_type '${p.quantType}' is not supported; 'int', 'fp8', 'fp4' and 'nvfp4' are (FP8 activations are not)`;
  if (p.sparseMixer) return 'use_sparse_mixer is not supported';
  if (p.prepacked === 1) return 'weights_prepacked=1 (an execution provider layout) is not supported';
  const fc3 = !!ctx.node.inputs[8];
  if (p.activation === 'swiglu' && ![0, 1, 2].includes(p.fusion)) return `swiglu_fusion must be 0, 1 or 2, got ${p.fusion}`;
  if (p.activation === 'swiglu' && p.fusion === 0 && !fc3)
    return 'SwiGLU with swiglu_fusion=0 (not fused) needs fc3_experts_weights (its linear branch)';
  if (fc3 && p.activation === 'swiglu' && p.fusion !== 0)
    return `fc3_experts_weights with SwiGLU need swiglu_fusion=0, got ${p.fusion} (FC1 already holds both branches)`;
  for (const i of [9, 10, 13]) if (ctx.node.inputs[i] && !fc3) return `fc3 input ${i} is given without fc3_experts_weights`;
  if (fc3 && p.quantType !== 'int')
    return `fc3_experts_weights with quant_type '${p.quantType}' are not supported (there is no fc3 global scale)`;
  if (fc3 && !ctx.node.inputs[9]) return 'fc3_experts_weights need fc3_scales';
  for (let i = 17; i < ctx.node.inputs.length; i++)
    if (ctx.node.inputs[i]) return 'activation scale inputs (FP8 activations) are not supported';
  const float = FLOAT_QUANTS.includes(p.quantType);
  if (!float && (ctx.node.inputs[15] || ctx.node.inputs[16]))
    return "fc*_global_scale inputs are only used with float quant_types, not 'int'";
  const weightType = p.quantType === 'fp8' ? OnnxDataType.FLOAT8E4M3FN : OnnxDataType.UINT8;
  for (const [i, what] of [
    [2, 'fc1_experts_weights'],
    [5, 'fc2_experts_weights'],
  ] as const) {
    const t = ctx.inputType(i);
    if (t !== undefined && t !== weightType)
      return `${what} must be ${p.quantType === 'fp8' ? 'float8e4m3fn' : 'uint8'} for quant_type '${p.quantType}', got element type ${t}`;
  }
  if (p.quantType === 'fp4' || p.quantType === 'nvfp4') {
    const want = p.quantType === 'fp4' ? OnnxDataType.FLOAT8E8M0 : OnnxDataType.FLOAT8E4M3FN;
    for (const i of [3, 6]) {
      const t = ctx.inputType(i);
      if (t !== undefined && t !== want)
        return `${p.quantType} block scales must be ${p.quantType === 'fp4' ? 'float8e8m0' : 'float8e4m3fn'}, got element type ${t}`;
    }
  }
  const t = ctx.inputType(0);
  if (t !== undefined && !FLOATS.includes(t)) return `input must be float, float16 or bfloat16, got element type ${t}`;
  return undefined;
}

/** dequant(W) as float32 [E, N, K] from W [E, N, K / per], its scales and optional packed zero points. */
function dequantized(
  ctx: OpContext<QMoEParams>,
  w: number,
  s: number,
  z: number,
  g: number,
  dims: { E: number; N: number; K: number },
  label: string,
): mx.Array {
  if (ctx.params.quantType !== 'int') return floatDequantized(ctx, w, s, g, dims, label);
  const { bits, block } = ctx.params;
  const { E, N, K } = dims;
  const per = 8 / bits;
  const q = ctx.input(w);
  if (q.ndim !== 3 || q.shape[0] !== E || q.shape[1] !== N || q.shape[2] * per !== K)
    throw new RangeError(`${label}_experts_weights must be [${E}, ${N}, ${K / per}], got [${q.shape.join(', ')}]`);
  const kb = block ? K / block : 1;
  if (block && !Number.isInteger(kb)) throw new RangeError(`${label}: K = ${K} is not a multiple of block_size ${block}`);
  const scales = mx.astype(ctx.input(s), 'float32');
  const wantScales = block ? [E, N, kb] : [E, N];
  if (scales.ndim !== wantScales.length || scales.shape.some((d, i) => d !== wantScales[i]))
    throw new RangeError(`${label}_scales must be [${wantScales.join(', ')}], got [${scales.shape.join(', ')}]`);
  const values = mx.reshape(mx.astype(unpackFields(q, bits), 'float32'), [E, N, kb, K / kb]);
  let zp: mx.Array;
  if (!ctx.has(z)) zp = mx.scalar(2 ** (bits - 1), 'float32');
  else {
    const zq = ctx.input(z);
    if (zq.dtype !== 'uint8') throw new TypeError(`${label}_zero_points must be uint8`);
    if (block) {
      // [E, N, ceil(kb / per)]: packed along the blocks of each row.
      const want = [E, N, Math.ceil(kb / per)];
      if (zq.ndim !== 3 || zq.shape.some((d, i) => d !== want[i]))
        throw new RangeError(`${label}_zero_points must be [${want.join(', ')}], got [${zq.shape.join(', ')}]`);
      zp = mx.slice(mx.astype(unpackFields(zq, bits), 'float32'), [0, 0, 0], [E, N, kb], [1, 1, 1]);
    } else {
      // [E, ceil(N / per)]: packed along the rows.
      const want = [E, Math.ceil(N / per)];
      if (zq.ndim !== 2 || zq.shape.some((d, i) => d !== want[i]))
        throw new RangeError(`${label}_zero_points must be [${want.join(', ')}], got [${zq.shape.join(', ')}]`);
      zp = mx.slice(mx.astype(unpackFields(zq, bits), 'float32'), [0, 0], [E, N], [1, 1]);
    }
    zp = mx.reshape(zp, [E, N, kb, 1]);
  }
  const w32 = mx.multiply(mx.subtract(values, zp), mx.reshape(scales, [E, N, kb, 1]));
  return mx.reshape(w32, [E, N, K]);
}

/** A float8e8m0 or float8e4m3fn tensor's codes as uint8. */
function codes(ctx: OpContext<QMoEParams>, i: number): mx.Array {
  const host = ctx.host(i);
  if (!(host.data instanceof Uint8Array)) throw new TypeError(`${ctx.where}: input ${i} must hold 8-bit codes`);
  return mx.Array.fromTypedArray(host.data, host.dims, 'uint8');
}

/** dequant(W) as float32 [E, N, K] for the float quant_types (fp8, fp4, nvfp4). */
function floatDequantized(
  ctx: OpContext<QMoEParams>,
  w: number,
  s: number,
  g: number,
  dims: { E: number; N: number; K: number },
  label: string,
): mx.Array {
  const { quantType, block } = ctx.params;
  const { E, N, K } = dims;
  const per = quantType === 'fp8' ? 1 : 2;
  if (!ctx.has(g)) throw new RangeError(`${label}_global_scale is required with quant_type '${quantType}'`);
  const gs = mx.astype(ctx.input(g), 'float32');
  if (gs.ndim !== 1 || gs.shape[0] !== E) throw new RangeError(`${label}_global_scale must be [${E}], got [${gs.shape.join(', ')}]`);
  const q = quantType === 'fp8' ? codes(ctx, w) : ctx.input(w);
  if (q.ndim !== 3 || q.shape[0] !== E || q.shape[1] !== N || q.shape[2] * per !== K)
    throw new RangeError(`${label}_experts_weights must be [${E}, ${N}, ${K / per}], got [${q.shape.join(', ')}]`);
  const global = mx.reshape(gs, [E, 1, 1]);
  if (quantType === 'fp8') return mx.multiply(decodeMiniFloatArray(q, OnnxDataType.FLOAT8E4M3FN), global);
  const kb = K / block;
  if (!Number.isInteger(kb)) throw new RangeError(`${label}: K = ${K} is not a multiple of the ${quantType} block of ${block}`);
  if (!ctx.has(s)) throw new RangeError(`${label}_scales (the ${quantType} block scales) are required`);
  const sc = codes(ctx, s);
  if (sc.ndim !== 3 || sc.shape[0] !== E || sc.shape[1] !== N || sc.shape[2] !== kb)
    throw new RangeError(`${label}_scales must be [${E}, ${N}, ${kb}], got [${sc.shape.join(', ')}]`);
  const blockScale = quantType === 'fp4' ? decodeE8M0Array(sc) : decodeMiniFloatArray(sc, OnnxDataType.FLOAT8E4M3FN);
  const fields = mx.reshape(unpackFields(q, 4), [E, N, kb, block]);
  const values = decodeMiniFloatArray(fields, OnnxDataType.FLOAT4E2M1);
  const scaled = mx.multiply(values, mx.reshape(mx.multiply(mx.astype(blockScale, 'float32'), global), [E, N, kb, 1]));
  return mx.reshape(scaled, [E, N, K]);
}

/** The bias rows of the chosen experts, [R, 1, N], or undefined. */
function biasRows(ctx: OpContext<QMoEParams>, i: number, experts: mx.Array, E: number, N: number, label: string): mx.Array | undefined {
  const b = ctx.optional(i);
  if (!b) return undefined;
  if (b.ndim !== 2 || b.shape[0] !== E || b.shape[1] !== N)
    throw new RangeError(`${label}_experts_bias must be [${E}, ${N}], got [${b.shape.join(', ')}]`);
  return mx.expandDims(mx.take(mx.astype(b, 'float32'), experts, 0), 1);
}

function activate(h: mx.Array, p: QMoEParams, inter: number): mx.Array {
  switch (p.activation) {
    case 'relu':
      return mx.maximum(h, 0);
    case 'silu':
      return silu(h);
    case 'identity':
      return h;
    case 'gelu':
      // The tanh form spelled out, as onnxruntime's kernel computes it.
      return gelu(h, { approximate: 'tanh', implementation: 'composite' });
    case 'swiglu': {
      if (p.fusion === 0) throw new Error('internal error: unfused SwiGLU is applied by gated()');
      const shape = h.shape.slice(0, -1);
      let g: mx.Array, l: mx.Array;
      if (p.fusion === 1) {
        const pairs = mx.reshape(h, [...shape, inter, 2]);
        g = mx.squeeze(mx.slice(pairs, [...shape.map(() => 0), 0, 0], [...shape, inter, 1], [...shape.map(() => 1), 1, 1]), -1);
        l = mx.squeeze(mx.slice(pairs, [...shape.map(() => 0), 0, 1], [...shape, inter, 2], [...shape.map(() => 1), 1, 1]), -1);
      } else {
        const z = shape.map(() => 0),
          one = shape.map(() => 1);
        g = mx.slice(h, [...z, 0], [...shape, inter], [...one, 1]);
        l = mx.slice(h, [...z, inter], [...shape, 2 * inter], [...one, 1]);
      }
      return swigluOf(g, l, p);
    }
  }
}

/** G · sigmoid(alpha · G) · (L + beta), G = min(g, limit), L = clamp(l, ±limit). */
const swigluOf = (g: mx.Array, l: mx.Array, p: QMoEParams): mx.Array => swiglu(g, l, { beta: p.alpha, limit: p.limit, upShift: p.beta });

/** With FC3: SwiGLU of (FC1, FC3) when unfused, else act(FC1) · FC3. */
function gated(h1: mx.Array, h3: mx.Array, p: QMoEParams, inter: number): mx.Array {
  return p.activation === 'swiglu' ? swigluOf(h1, h3, p) : mx.multiply(activate(h1, p, inter), h3);
}

function run(ctx: OpContext<QMoEParams>): mx.Array[] {
  const p = ctx.params;
  const input = ctx.input(0);
  const H = input.shape[input.ndim - 1];
  if (input.ndim !== 2 && input.ndim !== 3)
    throw new RangeError(`input must be [tokens, hidden] or [batch, sequence, hidden], got [${input.shape.join(', ')}]`);
  const T = input.size / H;
  const router = mx.astype(ctx.input(1), 'float32');
  if (router.ndim !== 2 || router.shape[0] !== T)
    throw new RangeError(`router_probs must be [${T}, num_experts], got [${router.shape.join(', ')}]`);
  const E = router.shape[1];
  if (p.k > E) throw new RangeError(`k = ${p.k} is more than the ${E} experts`);
  const w2 = ctx.shape(5);
  if (w2.length !== 3) throw new RangeError(`fc2_experts_weights must be 3-D, got [${w2.join(', ')}]`);
  const I = w2[2] * perByte(p);
  const F1 = p.activation === 'swiglu' && p.fusion !== 0 ? 2 * I : I;
  if (p.block && (H % p.block || I % p.block))
    throw new RangeError(`hidden size ${H} and inter size ${I} must be multiples of block_size ${p.block}`);
  const W1 = dequantized(ctx, 2, 3, 11, 15, { E, N: F1, K: H }, 'fc1');
  const W2 = dequantized(ctx, 5, 6, 12, 16, { E, N: H, K: I }, 'fc2');

  // Routing: the k largest logits per token (ties: the lower expert index first).
  const order = mx.argsort(mx.negative(router), -1);
  const chosen = mx.slice(order, [0, 0], [T, p.k], [1, 1]); // [T, k]
  let weights: mx.Array;
  if (ctx.has(14)) {
    const rw = mx.astype(ctx.input(14), 'float32');
    if (rw.ndim !== 2 || rw.shape[0] !== T || rw.shape[1] !== E)
      throw new RangeError(`router_weights must be [${T}, ${E}], got [${rw.shape.join(', ')}]`);
    weights = mx.takeAlongAxis(rw, chosen, 1);
    if (p.normalize) {
      const sum = mx.sum(weights, -1, { keepdims: true });
      weights = mx.where(mx.equal(sum, 0), mx.zerosLike(weights), mx.divide(weights, sum));
    }
  } else weights = mx.softmax(mx.takeAlongAxis(router, chosen, 1), -1, { precise: true });

  const R = T * p.k;
  const experts = mx.astype(mx.reshape(chosen, [R]), 'uint32');
  const tokens = mx.astype(mx.floorDivide(mx.arange(0, R, 1, 'int32'), p.k), 'uint32');
  const x = mx.reshape(mx.astype(input, 'float32'), [T, 1, H]);
  let h = mx.gatherMm(x, mx.transpose(W1, [0, 2, 1]), tokens, experts, false); // [R, 1, F1]
  const b1 = biasRows(ctx, 4, experts, E, F1, 'fc1');
  if (b1) h = mx.add(h, b1);
  let a: mx.Array; // [R, 1, I]
  if (ctx.has(8)) {
    const W3 = dequantized(ctx, 8, 9, 13, 15, { E, N: I, K: H }, 'fc3');
    let h3 = mx.gatherMm(x, mx.transpose(W3, [0, 2, 1]), tokens, experts, false);
    const b3 = biasRows(ctx, 10, experts, E, I, 'fc3');
    if (b3) h3 = mx.add(h3, b3);
    a = gated(h, h3, p, I);
  } else a = activate(h, p, I);
  let y = mx.gatherMm(a, mx.transpose(W2, [0, 2, 1]), null, experts, false); // [R, 1, H]
  const b2 = biasRows(ctx, 7, experts, E, H, 'fc2');
  if (b2) y = mx.add(y, b2);
  const mixed = mx.sum(mx.multiply(mx.reshape(y, [T, p.k, H]), mx.reshape(weights, [T, p.k, 1])), 1);
  return [mx.astype(mx.reshape(mixed, input.shape), input.dtype)];
}

export const qmoeOps: OpEntry[] = [
  msOp('QMoE', 1, {
    parse,
    check,
    run,
    note: "quant_type 'int' (2/4/8 bits, row-wise or block-wise, zero points), 'fp8' (e4m3fn), 'fp4' (MXFP4) and 'nvfp4' experts with global scales, relu/gelu/silu/identity/SwiGLU (fused 1 or 2, or unfused with FC3), gated FC3 experts (int), router_weights; experts dequantized each run; no FP8 activations (wfp4afp8), no use_sparse_mixer (falls back)",
  }),
];
