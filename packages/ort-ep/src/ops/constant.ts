// Ops that make tensors from attributes and shapes: Constant, ConstantOfShape, Range, EyeLike.
// Constants are host tensors (strings included: they never need MLX); the others build on the
// host while the result is small shape math, and on MLX otherwise.
import * as mx from '@mlx/core';
import { OnnxDataType, sparseToDense, type HostTensor, type SparseTensorIR } from '../onnx/index.js';
import type { OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { hostFill, numAt } from './helpers/shape-host.js';
import { hostInt64, hostNumbers, hostOf, mxType } from './helpers/util.js';
import { mxDtypeOf, upload } from '../runtime/convert.js';
import { sizeOf } from './helpers/util.js';

// ---------------------------------------------------------------------------------------------
// Constant: exactly one of value, sparse_value, value_float(s), value_int(s), value_string(s).

function constantValue(ctx: { attrs: OpContext['attrs']; node: OpContext['node'] }): HostTensor {
  const a = ctx.attrs;
  const t = a.tensor('value');
  if (t) return t;
  const sp = ctx.node.attributes.get('sparse_value');
  if (sp?.type === 'sparse_tensor') return sparseToDense(sp.value as SparseTensorIR, `Constant '${ctx.node.name}'`);
  if (a.has('value_float')) return { dtype: OnnxDataType.FLOAT, dims: [], data: Float32Array.of(a.float('value_float')) };
  if (a.has('value_floats')) {
    const v = a.floats('value_floats');
    return { dtype: OnnxDataType.FLOAT, dims: [v.length], data: Float32Array.from(v) };
  }
  if (a.has('value_int')) return hostInt64([a.int('value_int')], []);
  if (a.has('value_ints')) return hostInt64(a.ints('value_ints'));
  if (a.has('value_string')) return { dtype: OnnxDataType.STRING, dims: [], data: [a.string('value_string')] };
  if (a.has('value_strings')) {
    const v = a.strings('value_strings');
    return { dtype: OnnxDataType.STRING, dims: [v.length], data: v };
  }
  throw new TypeError(`Constant '${ctx.node.name}' has no value attribute`);
}

const constantEntry: OpEntry = onnxOp('Constant', 1, {
  check: (ctx) => {
    try {
      constantValue(ctx);
      return undefined;
    } catch (e) {
      return (e as Error).message;
    }
  },
  host: (ctx) => [constantValue(ctx)],
  run: (ctx) => [constantValue(ctx)],
});

// ---------------------------------------------------------------------------------------------
// ConstantOfShape: a one-element `value` tensor (default float32 0) broadcast to the given shape.

const zeroFloat: HostTensor = { dtype: OnnxDataType.FLOAT, dims: [1], data: new Float32Array(1) };

/** The shape input: non-negative integer dims (onnxruntime refuses negative ones). */
function fillDims(ctx: OpContext): number[] {
  const dims = hostNumbers(ctx.host(0));
  const bad = dims.find((d) => !Number.isSafeInteger(d) || d < 0);
  if (bad !== undefined)
    throw new RangeError(`ConstantOfShape: the shape [${dims.join(', ')}] has a dim ${bad} that is not a non-negative integer`);
  return dims;
}

const constantOfShapeEntry = onnxOp('ConstantOfShape', 9, {
  parse: (attrs) => attrs.tensor('value') ?? zeroFloat,
  // A fill value MLX cannot hold (a string) has only the host, whatever the size.
  hostSize: (ctx) => (mxDtypeOf(ctx.params.dtype) ? sizeOf(fillDims(ctx)) : 0),
  host: (ctx) => [hostFill(ctx.params, fillDims(ctx))],
  run: (ctx) => {
    const dims = fillDims(ctx);
    const v = upload(ctx.params);
    return [mx.broadcastTo(mx.reshape(v, []), dims)];
  },
});

// ---------------------------------------------------------------------------------------------
// Range: ceil((limit - start) / delta) elements start + i * delta, in the inputs' type.

const RANGE_NAMES = ['start', 'limit', 'delta'];

function rangeArgs(ctx: OpContext): { start: number; delta: number; n: number; type: number } {
  const [start, limit, delta] = [0, 1, 2].map((i) => {
    const t = ctx.host(i);
    // onnxruntime takes scalars and one-element vectors.
    if (t.dims.length > 1 || t.data.length !== 1)
      throw new RangeError(`Range: ${RANGE_NAMES[i]} must be a scalar, got shape [${t.dims.join(', ')}]`);
    return numAt(t, 0);
  });
  if (delta === 0) throw new RangeError('Range: delta is 0');
  const n = Math.max(Math.ceil((limit - start) / delta), 0);
  if (!Number.isSafeInteger(n))
    throw new RangeError(`Range: start ${start}, limit ${limit} and delta ${delta} give no finite element count (${n})`);
  return { start, delta, n, type: ctx.elemType(0) };
}

const hostRangeTypes = new Set<number>([OnnxDataType.INT32, OnnxDataType.INT64, OnnxDataType.FLOAT, OnnxDataType.DOUBLE]);

const rangeEntry: OpEntry = onnxOp('Range', 11, {
  hostSize: (ctx) => rangeArgs(ctx).n,
  host: (ctx) => {
    const { start, delta, n, type } = rangeArgs(ctx);
    if (!hostRangeTypes.has(type)) return undefined;
    return [
      hostOf(
        type,
        Array.from({ length: n }, (_, i) => start + i * delta),
        [n],
      ),
    ];
  },
  run: (ctx) => {
    const { start, delta, n, type } = rangeArgs(ctx);
    const want = mxType(type, ctx.where);
    // Integers are exact in their own type; float16/bfloat16 are computed in float32, then rounded once.
    const work: mx.Dtype = want === 'float64' || want.startsWith('int') ? want : 'float32';
    const r = mx.add(mx.multiply(mx.arange(0, n, 1, work), delta), start);
    return [r.dtype === want ? r : mx.astype(r, want)];
  },
});

// ---------------------------------------------------------------------------------------------
// EyeLike: ones on diagonal k of a 2-D tensor shaped like the input.

const eyeLikeEntry = onnxOp('EyeLike', 9, {
  /** dtype: the input's type when absent; k: the diagonal. */
  parse: (attrs) => ({ dtype: attrs.has('dtype') ? attrs.int('dtype') : undefined, k: attrs.int('k', 0) }),
  check: (ctx) => (ctx.params.dtype === OnnxDataType.STRING ? 'EyeLike to string is not supported on MLX' : undefined),
  run: (ctx) => {
    const dims = ctx.shape(0);
    if (dims.length !== 2) throw new RangeError(`EyeLike: input must be 2-D, got [${dims.join(', ')}]`);
    const type = ctx.params.dtype ?? ctx.elemType(0);
    const k = ctx.params.k;
    const [n, m] = dims;
    // Build in float32 and cast: MLX's eye may not take every ONNX element type directly.
    const eye = k >= m || -k >= n ? mx.zeros([n, m], 'float32') : mx.eye(n, m, k, 'float32');
    return [mx.astype(eye, mxType(type, ctx.where))];
  },
});

export const constantOps: OpEntry[] = [constantEntry, constantOfShapeEntry, rangeEntry, eyeLikeEntry];
