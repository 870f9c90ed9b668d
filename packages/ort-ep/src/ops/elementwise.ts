// Elementwise ops: arithmetic, comparisons, logic, unary math, Cast, Where, Clip.
// Each entry is small: the MLX translation, and a host version for shape math where it matters.
import * as mx from '@mlx/core';
import { OnnxDataType, type HostTensor } from '../onnx/index.js';
import type { Attrs } from '../registry/attrs.js';
import type { OpContext, OpEntry } from '../registry/types.js';
import { invalidNode, onnxOp } from '../registry/op.js';
import { hostElementwise, hostMathTypes, isBig, isIntType } from './helpers/host-math.js';
import { isFloatType, keepType, mxType } from './helpers/util.js';
import { stringEqual } from './strings.js';
import { decodeE8M0, decodeMiniFloat, encodeE8M0, encodeMiniFloat, isMiniFloat, type E8M0Rounding } from './helpers/minifloat.js';
import { float32ToBfloat16Bits, numberToFloat16Bits } from '@mlx/core';
import { hostFloats } from './helpers/shape-host.js';

type Scalar = number | bigint;

function hostArgs(ctx: OpContext): HostTensor[] | undefined {
  const out: HostTensor[] = [];
  for (let i = 0; i < ctx.inputCount; i++) {
    const t = ctx.hostIfKnown(i);
    if (!t || !hostMathTypes.has(t.dtype)) return undefined;
    out.push(t);
  }
  return out;
}

interface BinaryOptions<P> {
  /** The host version, for shape math on small host tensors. */
  host?: (a: Scalar, b: Scalar, type: number) => Scalar;
  /** The result's element type when it is not the input's (comparisons: bool). */
  outType?: number;
  parse?: (attrs: Attrs) => P;
}

/** Binary numeric op: MLX function, host function, and the opsets where it is the same. */
function binary<P = undefined>(
  opType: string,
  since: number,
  dev: (a: mx.Array, b: mx.Array, ctx: OpContext<P>) => mx.Array,
  opts: BinaryOptions<P> = {},
): OpEntry<P> {
  const { host, outType } = opts;
  return onnxOp<P>(opType, since, {
    parse: opts.parse,
    host:
      host &&
      ((ctx) => {
        const ins = hostArgs(ctx);
        if (!ins) return undefined;
        const t = ins[0].dtype;
        if (ins[1].dtype !== t) return undefined;
        const big = isBig(t);
        return [hostElementwise(ins, outType ?? t, (a, b) => host(big ? BigInt(a) : Number(a), big ? BigInt(b) : Number(b), t))];
      }),
    run: (ctx) => {
      const r = dev(ctx.input(0), ctx.input(1), ctx);
      return [outType === undefined ? keepType(r, ctx.elemType(0)) : r];
    },
  });
}

/**
 * ONNX integer division truncates toward zero; MLX's floor_divide floors. A zero divisor is an
 * error (a guard), and the hardware's trap is avoided either way: zero divisors divide by 1, and
 * the most negative value divided by -1 is negated instead (it wraps to itself, as in
 * two's-complement arithmetic, where x86's idiv raises SIGFPE).
 */
function intDivide(a: mx.Array, b: mx.Array, ctx?: OpContext<unknown>): mx.Array {
  const zero = mx.equal(b, 0);
  if (ctx) ctx.guard(mx.any(zero), () => 'integer division by zero');
  const minusOne = mx.equal(b, -1);
  const safe = mx.where(mx.logicalOr(zero, minusOne), mx.onesLike(b), b);
  const q = mx.floorDivide(a, safe);
  const r = mx.remainder(a, safe);
  const fix = mx.logicalAnd(mx.notEqual(r, 0), mx.notEqual(mx.less(a, 0), mx.less(safe, 0)));
  const t = mx.where(fix, mx.add(q, 1), q);
  return mx.where(minusOne, mx.negative(mx.broadcastTo(a, t.shape)), t);
}

function truncDiv(a: Scalar, b: Scalar): Scalar {
  if (b === 0 || b === 0n) throw new RangeError('integer division by zero');
  if (typeof a === 'bigint') return a / (b as bigint);
  return Math.trunc(a / (b as number));
}

function divide(a: mx.Array, b: mx.Array, ctx: OpContext): mx.Array {
  return isIntType(ctx.elemType(0)) ? intDivide(a, b, ctx) : mx.divide(a, b);
}

/** Mod's fmod: C's fmod (the dividend's sign) instead of the divisor's sign. */
function mod(a: mx.Array, b: mx.Array, ctx: OpContext<boolean>): mx.Array {
  if (isIntType(ctx.elemType(0))) {
    // As for Div: a zero divisor is an error and never reaches the hardware; x mod -1 is 0.
    const zero = mx.equal(b, 0);
    ctx.guard(mx.any(zero), () => 'integer modulo by zero');
    const minusOne = mx.equal(b, -1);
    const safe = mx.where(mx.logicalOr(zero, minusOne), mx.onesLike(b), b);
    // Python's % (the divisor's sign) for fmod=0; C's fmod (the dividend's sign) for fmod=1.
    const r = ctx.params ? mx.subtract(a, mx.multiply(safe, intDivide(a, safe))) : mx.remainder(a, safe);
    return mx.where(minusOne, mx.zerosLike(r), r);
  }
  // The spec: "If the input type is floating point, then fmod attribute must be set to 1"; onnxruntime refuses it too.
  if (!ctx.params)
    throw new RangeError(`Mod of ${a.dtype} inputs needs fmod=1 (the spec requires it for floating-point types), got fmod=0`);
  const q = mx.divide(a, b);
  return mx.subtract(a, mx.multiply(b, mx.where(mx.less(q, 0), mx.ceil(q), mx.floor(q))));
}

function power(a: mx.Array, b: mx.Array): mx.Array {
  // ONNX Pow: the result has the base's type; integer bases with float exponents compute in float.
  const int = (d: mx.Dtype) => d === 'int32' || d === 'int64';
  if (int(a.dtype) && (int(b.dtype) || ['int8', 'int16', 'uint8', 'uint16', 'uint32'].includes(b.dtype))) return intPower(a, b);
  if (a.dtype !== b.dtype) {
    const wide = mx.power(mx.astype(a, 'float64' === a.dtype ? 'float64' : 'float32'), mx.astype(b, 'float32'));
    return mx.astype(wide, a.dtype);
  }
  return mx.power(a, b);
}

/**
 * Integer Pow as onnxruntime computes it: std::pow in double, converted back, where a result out
 * of the type's range (and 0 to a negative power, infinity) becomes the lowest value (x86-64's
 * conversion of an out-of-range double). The value itself is exact here (int64); onnxruntime's
 * double rounds int64 results past 2^53.
 */
function intPower(a: mx.Array, b: mx.Array): mx.Array {
  const dtype = a.dtype;
  const wa = mx.astype(a, 'int64');
  const wb = mx.astype(b, 'int64');
  const zero = mx.array(0, { dtype: 'int64' });
  const negative = mx.less(wb, zero);
  const exact = mx.power(wa, mx.where(negative, zero, wb));
  // A negative exponent: 1/x^n truncated, 0 but for x = ±1 (and ±1 keeps the sign of x^n).
  const one = mx.array(1, { dtype: 'int64' });
  const unit = mx.equal(mx.abs(wa), one);
  const odd = mx.notEqual(mx.remainder(wb, mx.array(2, { dtype: 'int64' })), zero);
  const unitPower = mx.where(mx.logicalAnd(mx.less(wa, zero), odd), mx.negative(one), one);
  const r = mx.where(negative, mx.where(unit, unitPower, zero), exact);
  // float32's estimate says whether int64 overflowed; the exact value where it did not.
  const approx = mx.abs(mx.power(mx.astype(a, 'float32'), mx.astype(b, 'float32')));
  const lowest = mx.array(dtype === 'int64' ? -(2n ** 63n) : -(2 ** 31), { dtype: 'int64' });
  let out = mx.logicalOr(mx.greaterEqual(approx, mx.array(dtype === 'int64' ? 2 ** 63 : 2 ** 62, 'float32')), mx.isnan(approx));
  if (dtype === 'int32')
    out = mx.logicalOr(out, mx.logicalOr(mx.greater(r, mx.array(2 ** 31 - 1, { dtype: 'int64' })), mx.less(r, lowest)));
  return mx.astype(mx.where(out, lowest, r), dtype);
}

const cmp = (
  opType: string,
  since: number,
  dev: (a: mx.Array, b: mx.Array) => mx.Array,
  host: (a: Scalar, b: Scalar) => boolean,
): OpEntry => binary(opType, since, dev, { host: (a, b) => (host(a, b) ? 1 : 0), outType: OnnxDataType.BOOL });

function unary(
  opType: string,
  since: number,
  dev: (a: mx.Array, ctx: OpContext) => mx.Array,
  opts: { host?: (a: Scalar) => Scalar; floatOnly?: boolean } = {},
): OpEntry {
  return onnxOp(opType, since, {
    host:
      opts.host &&
      ((ctx) => {
        const ins = hostArgs(ctx);
        if (!ins) return undefined;
        return [hostElementwise(ins, ins[0].dtype, (a) => opts.host!(a))];
      }),
    run: (ctx) => [keepType(dev(ctx.input(0), ctx), ctx.elemType(0))],
  });
}

function sameShapes(ctx: OpContext<boolean>): void {
  const first = ctx.shape(0).join(',');
  for (let i = 1; i < ctx.inputCount; i++)
    if (ctx.shape(i).join(',') !== first)
      throw new RangeError(
        `${ctx.where}: opsets before 8 have no broadcasting, and input ${i} has shape [${ctx.shape(i).join(', ')}], not [${first.split(',').join(', ')}]`,
      );
}

function variadic(
  opType: string,
  since: number,
  f: (a: mx.Array, b: mx.Array) => mx.Array,
  host?: (a: Scalar, b: Scalar) => Scalar,
  finish?: (acc: mx.Array, n: number) => mx.Array,
): OpEntry {
  return onnxOp<boolean>(opType, since, {
    // Opset 6 (Max/Min/Sum/Mean-6): no broadcasting, the inputs have one shape.
    parse: (_attrs, opset) => opset < 8,
    host:
      host &&
      ((ctx) => {
        const ins = hostArgs(ctx);
        if (!ins || finish) return undefined;
        if (ctx.params) sameShapes(ctx);
        return [ins.slice(1).reduce((acc, t) => hostElementwise([acc, t], acc.dtype, (a, b) => host(a, b)), ins[0])];
      }),
    run: (ctx) => {
      if (ctx.params) sameShapes(ctx);
      let acc = ctx.input(0);
      for (let i = 1; i < ctx.inputCount; i++) acc = f(acc, ctx.input(i));
      if (ctx.inputCount === 1) acc = mx.add(acc, mx.zerosLike(acc)); // a copy with the same broadcasting rules
      return [keepType(finish ? finish(acc, ctx.inputCount) : acc, ctx.elemType(0))];
    },
  });
}

const max = (a: Scalar, b: Scalar) => (a > b ? a : b);
const min = (a: Scalar, b: Scalar) => (a < b ? a : b);
const num = (f: (x: number) => number) => (a: Scalar) => (typeof a === 'bigint' ? BigInt(f(Number(a))) : f(a));

// ---------------------------------------------------------------------------------------------
// Cast

const castable = new Set<number>([
  OnnxDataType.FLOAT,
  OnnxDataType.UINT8,
  OnnxDataType.INT8,
  OnnxDataType.UINT16,
  OnnxDataType.INT16,
  OnnxDataType.INT32,
  OnnxDataType.INT64,
  OnnxDataType.BOOL,
  OnnxDataType.FLOAT16,
  OnnxDataType.DOUBLE,
  OnnxDataType.UINT32,
  OnnxDataType.UINT64,
  OnnxDataType.BFLOAT16,
]);

function hostCast(t: HostTensor, to: number): HostTensor | undefined {
  if (!hostMathTypes.has(t.dtype) || !hostMathTypes.has(to)) return undefined;
  const fromFloat = isFloatType(t.dtype);
  return hostElementwise([t], to, (a) => {
    if (to === OnnxDataType.BOOL) return Number(a) !== 0;
    if (isBig(to)) return BigInt(fromFloat ? Math.trunc(Number(a)) : a);
    if (to === OnnxDataType.INT32) return fromFloat ? Math.trunc(Number(a)) | 0 : Number(BigInt.asIntN(32, BigInt(a)));
    return Number(a);
  });
}

const packedInt: Record<number, [bits: number, signed: boolean]> = {
  [OnnxDataType.INT4]: [4, true],
  [OnnxDataType.UINT4]: [4, false],
  [OnnxDataType.INT2]: [2, true],
  [OnnxDataType.UINT2]: [2, false],
};
/** Element types MLX has no dtype for, cast on the host. */
const hostCastType = (t: number) => isMiniFloat(t) || t in packedInt || t === OnnxDataType.FLOAT8E8M0;

function hostValues(t: HostTensor): number[] {
  if (t.dtype === OnnxDataType.FLOAT8E8M0) return Array.from(t.data as ArrayLike<number>, decodeE8M0);
  if (!isMiniFloat(t.dtype)) return hostFloats(t);
  return Array.from(t.data as ArrayLike<number>, (code) => decodeMiniFloat(code, t.dtype));
}

/** The sign bit of each float element (NaN signs included, which JS numbers drop). */
function signBits(t: HostTensor): boolean[] {
  const d = t.data as ArrayBufferView & ArrayLike<number>;
  const n = d.length;
  if (t.dtype === OnnxDataType.FLOAT) {
    const u = new Uint32Array(d.buffer, d.byteOffset, n);
    return Array.from(u, (b) => b >>> 31 === 1);
  }
  if (t.dtype === OnnxDataType.FLOAT16 || t.dtype === OnnxDataType.BFLOAT16) return Array.from(d, (b) => (b & 0x8000) !== 0);
  if (t.dtype === OnnxDataType.DOUBLE) {
    const u = new Uint32Array(d.buffer, d.byteOffset, 2 * n);
    return Array.from({ length: n }, (_, i) => u[2 * i + 1] >>> 31 === 1);
  }
  return Array.from(d, (v) => Number(v) < 0);
}

/** Casts from or to the formats MLX cannot hold (float8, float4, int4/int2 with wrap-around). */
function castOnHost(t: HostTensor, to: number, saturate: boolean, rounding: E8M0Rounding = 'up'): HostTensor {
  const vals = hostValues(t);
  const n = vals.length;
  if (to === OnnxDataType.FLOAT8E8M0)
    return { dtype: to, dims: [...t.dims], data: Uint8Array.from(vals, (v) => encodeE8M0(v, saturate, rounding)) };
  if (isMiniFloat(to)) {
    const neg = signBits(t);
    return { dtype: to, dims: [...t.dims], data: Uint8Array.from(vals, (v, i) => encodeMiniFloat(v, to, saturate, neg[i])) };
  }
  if (to in packedInt) {
    const [bits, signed] = packedInt[to];
    const m = 1 << bits;
    const out = signed ? new Int8Array(n) : new Uint8Array(n);
    vals.forEach((v, i) => {
      let x = ((Math.trunc(v) % m) + m) % m;
      if (signed && x >= m / 2) x -= m;
      out[i] = x;
    });
    return { dtype: to, dims: [...t.dims], data: out };
  }
  switch (to) {
    case OnnxDataType.FLOAT16:
      return { dtype: to, dims: [...t.dims], data: Uint16Array.from(vals, numberToFloat16Bits) };
    case OnnxDataType.BFLOAT16:
      return { dtype: to, dims: [...t.dims], data: Uint16Array.from(vals, float32ToBfloat16Bits) };
    case OnnxDataType.FLOAT:
      return { dtype: to, dims: [...t.dims], data: Float32Array.from(vals) };
    case OnnxDataType.DOUBLE:
      return { dtype: to, dims: [...t.dims], data: Float64Array.from(vals) };
    case OnnxDataType.INT8:
      return { dtype: to, dims: [...t.dims], data: Int8Array.from(vals, Math.trunc) };
    case OnnxDataType.UINT8:
      return { dtype: to, dims: [...t.dims], data: Uint8Array.from(vals, Math.trunc) };
    case OnnxDataType.INT16:
      return { dtype: to, dims: [...t.dims], data: Int16Array.from(vals, Math.trunc) };
    case OnnxDataType.UINT16:
      return { dtype: to, dims: [...t.dims], data: Uint16Array.from(vals, Math.trunc) };
    case OnnxDataType.INT32:
      return { dtype: to, dims: [...t.dims], data: Int32Array.from(vals, Math.trunc) };
    case OnnxDataType.UINT32:
      return { dtype: to, dims: [...t.dims], data: Uint32Array.from(vals, Math.trunc) };
    case OnnxDataType.INT64:
      return { dtype: to, dims: [...t.dims], data: BigInt64Array.from(vals, (v) => BigInt(Math.trunc(v))) };
    case OnnxDataType.UINT64:
      return { dtype: to, dims: [...t.dims], data: BigUint64Array.from(vals, (v) => BigInt(Math.trunc(v))) };
    case OnnxDataType.BOOL:
      return { dtype: to, dims: [...t.dims], data: Uint8Array.from(vals, (v) => (v !== 0 ? 1 : 0)) };
  }
  throw new TypeError(`cast to element type ${to} is not supported`);
}

interface CastParams {
  /** Cast's `to`; CastLike takes its input 1's type. */
  to?: number;
  /** Out-of-range values to float8 saturate (opset 19+; the default). */
  saturate: boolean;
  /** How values round to float8e8m0 (opset 25+). */
  rounding: E8M0Rounding;
}

function parseRounding(attrs: Attrs): E8M0Rounding {
  const r = attrs.string('round_mode', 'up');
  if (r !== 'up' && r !== 'down' && r !== 'nearest') throw new RangeError(`Cast round_mode '${r}' is not up, down or nearest`);
  return r;
}

function castEntry(opType: 'Cast' | 'CastLike', since: number): OpEntry<CastParams> {
  return onnxOp(opType, since, {
    parse: (attrs): CastParams => ({
      to: opType === 'Cast' ? attrs.int('to') : undefined,
      saturate: attrs.int('saturate', 1) !== 0,
      rounding: parseRounding(attrs),
    }),
    check: (ctx) => {
      const to = ctx.params.to ?? ctx.inputType(1);
      if (to !== undefined && !castable.has(to) && !hostCastType(to))
        return `cast to element type ${to} is not supported on MLX (strings have no MLX dtype)`;
      const from = ctx.inputType(0);
      if (from !== undefined && !castable.has(from) && !hostCastType(from)) return `cast from element type ${from} is not supported on MLX`;
      return undefined;
    },
    host: (ctx) => {
      const t = ctx.hostIfKnown(0);
      const to = ctx.params.to ?? ctx.elemType(1);
      return t
        ? (() => {
            const r = hostCast(t, to);
            return r ? [r] : undefined;
          })()
        : undefined;
    },
    run: (ctx) => {
      const to = ctx.params.to ?? ctx.elemType(1);
      const from = ctx.elemType(0);
      if (hostCastType(from) || hostCastType(to)) return [castOnHost(ctx.host(0), to, ctx.params.saturate, ctx.params.rounding)];
      if (!castable.has(from)) throw new TypeError(`cast from element type ${from} is not supported on MLX`);
      return [mx.astype(ctx.input(0), mxType(to, ctx.where))];
    },
  });
}

// ---------------------------------------------------------------------------------------------
// Clip, Where, IsInf

const FLT_MAX = 3.4028234663852886e38;

/** The largest finite value of each float dtype (numeric_limits<T>::max()). */
const FINITE_MAX: Partial<Record<mx.Dtype, number>> = {
  float32: FLT_MAX,
  float64: Number.MAX_VALUE,
  float16: 65504,
  bfloat16: 3.3895313892515355e38,
};

/** Clip-6: the bounds are attributes. */
const legacyClipEntry = onnxOp('Clip', 6, {
  until: 10,
  parse: (attrs) => {
    const min = attrs.float('min', -FLT_MAX);
    const max = attrs.float('max', FLT_MAX);
    // onnxruntime refuses the node at load (min_ <= max_), NaN bounds included.
    if (!(min <= max)) throw invalidNode(`attribute min (${min}) is not at most attribute max (${max})`);
    return { min, max };
  },
  run: (ctx) => [mx.clip(ctx.input(0), ctx.params.min, ctx.params.max)],
});

/** Clip-11+: the bounds are optional inputs. */
const clipEntry = onnxOp('Clip', 11, {
  run: (ctx) => {
    const x = ctx.input(0);
    // A bound not given is the type's finite extreme, as in onnxruntime: infinities clamp to it.
    const extreme = FINITE_MAX[x.dtype];
    // A bound is a scalar (the spec; onnxruntime takes any one-element tensor): as a scalar, so
    // that it never broadcasts the result to another shape.
    const bound = (i: number) => {
      const b = ctx.optional(i);
      if (!b) return undefined;
      if (b.size !== 1) throw new RangeError(`Clip ${i === 1 ? 'min' : 'max'} has shape [${b.shape.join(', ')}], not a scalar`);
      return b.ndim ? mx.reshape(b, []) : b;
    };
    const lo = bound(1) ?? (extreme === undefined ? undefined : mx.array(-extreme, x.dtype));
    const hi = bound(2) ?? (extreme === undefined ? undefined : mx.array(extreme, x.dtype));
    // min > max gives max everywhere (numpy semantics, which the spec follows).
    let r = lo ? mx.maximum(x, lo) : x;
    r = hi ? mx.minimum(r, hi) : r;
    return [keepType(r, ctx.elemType(0))];
  },
});

const whereEntry: OpEntry = onnxOp('Where', 9, {
  host: (ctx) => {
    const c = ctx.hostIfKnown(0),
      a = ctx.hostIfKnown(1),
      b = ctx.hostIfKnown(2);
    if (!c || !a || !b || !hostMathTypes.has(a.dtype) || a.dtype !== b.dtype) return undefined;
    // (+0 for a -0 of X, as on the device)
    return [hostElementwise([c, a, b], a.dtype, (x, y, z) => (Number(x) ? (typeof y === 'number' ? y + 0 : y) : z))];
  },
  run: (ctx) => {
    const x = ctx.input(1);
    // onnxruntime's Where gives +0 where it picks a -0 of X (not of Y): X + 0 does the same.
    const picked = x.dtype.startsWith('float') || x.dtype === 'bfloat16' ? mx.add(x, mx.zerosLike(x)) : x;
    return [mx.where(mx.astype(ctx.input(0), 'bool'), picked, ctx.input(2))];
  },
});

const isInfEntry = onnxOp('IsInf', 10, {
  parse: (attrs) => ({ neg: attrs.int('detect_negative', 1) !== 0, pos: attrs.int('detect_positive', 1) !== 0 }),
  run: (ctx) => {
    const x = ctx.input(0);
    const { neg, pos } = ctx.params;
    if (neg && pos) return [mx.isinf(x)];
    if (neg) return [mx.isneginf(x)];
    if (pos) return [mx.isposinf(x)];
    return [mx.zerosLike(mx.astype(x, 'bool'))];
  },
});

/** BitShift's direction: true for LEFT. */
function parseShiftLeft(attrs: Attrs): boolean {
  const direction = attrs.string('direction');
  if (direction !== 'LEFT' && direction !== 'RIGHT') throw new RangeError(`BitShift direction '${direction}' is not LEFT or RIGHT`);
  return direction === 'LEFT';
}

/** Equal compares strings too: on the host at any size (MLX holds no strings, so placement sends them there). */
function equalEntry(): OpEntry {
  const numeric = cmp(
    'Equal',
    7,
    (a, b) => mx.equal(a, b),
    (a, b) => a === b || Number(a) === Number(b),
  );
  return {
    ...numeric,
    host: (ctx) => (ctx.elemType(0) === OnnxDataType.STRING ? [stringEqual(ctx.host(0), ctx.host(1), ctx.where)] : numeric.host!(ctx)),
  };
}

export const elementwiseOps: OpEntry[] = [
  binary('Add', 7, (a, b) => mx.add(a, b), { host: (a, b) => (a as number) + (b as number) }),
  binary('Sub', 7, (a, b) => mx.subtract(a, b), { host: (a, b) => (a as number) - (b as number) }),
  binary('Mul', 7, (a, b) => mx.multiply(a, b), { host: (a, b) => (a as number) * (b as number) }),
  binary('Div', 7, divide, { host: (a, b, t) => (isIntType(t) ? truncDiv(a, b) : (a as number) / (b as number)) }),
  binary('Pow', 7, power),
  binary('Mod', 10, mod, { parse: (attrs) => attrs.zeroOrOne('fmod', 0) }),
  binary('BitShift', 11, (a, b, ctx) => (ctx.params ? mx.leftShift(a, b) : mx.rightShift(a, b)), { parse: parseShiftLeft }),
  binary('BitwiseAnd', 18, (a, b) => mx.bitwiseAnd(a, b)),
  binary('BitwiseOr', 18, (a, b) => mx.bitwiseOr(a, b)),
  binary('BitwiseXor', 18, (a, b) => mx.bitwiseXor(a, b)),
  unary('BitwiseNot', 18, (a) => mx.bitwiseInvert(a)),
  equalEntry(),
  cmp(
    'Greater',
    7,
    (a, b) => mx.greater(a, b),
    (a, b) => a > b,
  ),
  cmp(
    'Less',
    7,
    (a, b) => mx.less(a, b),
    (a, b) => a < b,
  ),
  cmp(
    'GreaterOrEqual',
    12,
    (a, b) => mx.greaterEqual(a, b),
    (a, b) => a >= b,
  ),
  cmp(
    'LessOrEqual',
    12,
    (a, b) => mx.lessEqual(a, b),
    (a, b) => a <= b,
  ),
  cmp(
    'And',
    7,
    (a, b) => mx.logicalAnd(a, b),
    (a, b) => !!Number(a) && !!Number(b),
  ),
  cmp(
    'Or',
    7,
    (a, b) => mx.logicalOr(a, b),
    (a, b) => !!Number(a) || !!Number(b),
  ),
  cmp(
    'Xor',
    7,
    (a, b) => mx.notEqual(mx.astype(a, 'bool'), mx.astype(b, 'bool')),
    (a, b) => !!Number(a) !== !!Number(b),
  ),
  unary('Not', 1, (a) => mx.logicalNot(a), { host: (a) => (Number(a) ? 0 : 1) }),
  variadic('Max', 6, (a, b) => mx.maximum(a, b), max),
  variadic('Min', 6, (a, b) => mx.minimum(a, b), min),
  variadic(
    'Sum',
    6,
    (a, b) => mx.add(a, b),
    (a, b) => (a as number) + (b as number),
  ),
  variadic(
    'Mean',
    6,
    (a, b) => mx.add(a, b),
    undefined,
    (acc, n) => mx.divide(acc, n),
  ),
  unary('Abs', 6, (a) => mx.abs(a), { host: (a) => (a < 0 ? -a : a) }),
  unary('Neg', 6, (a) => mx.negative(a), { host: (a) => -a }),
  unary('Exp', 6, (a) => mx.ext.fusedActivation(a, null, 'exp')),
  unary('Log', 6, (a) => mx.log(a)),
  unary('Sqrt', 6, (a) => mx.sqrt(a), { host: num(Math.sqrt) }),
  unary('Reciprocal', 6, (a) => mx.reciprocal(a)),
  unary('Floor', 6, (a) => mx.floor(a), { host: num(Math.floor) }),
  unary('Ceil', 6, (a) => mx.ceil(a), { host: num(Math.ceil) }),
  unary('Round', 11, (a) => mx.round(a, 0)),
  // NaN in, the same NaN out, as onnxruntime (MLX's sign of a float32 NaN is 0).
  unary('Sign', 9, (a) => (a.dtype === 'float32' || a.dtype === 'float64' ? mx.where(mx.isnan(a), a, mx.sign(a)) : mx.sign(a))),
  unary('Sin', 7, (a) => mx.sin(a)),
  unary('Cos', 7, (a) => mx.cos(a)),
  unary('Tan', 7, (a) => mx.tan(a)),
  unary('Asin', 7, (a) => mx.arcsin(a)),
  unary('Acos', 7, (a) => mx.arccos(a)),
  unary('Atan', 7, (a) => mx.arctan(a)),
  unary('Sinh', 9, (a) => mx.sinh(a)),
  unary('Cosh', 9, (a) => mx.cosh(a)),
  unary('Asinh', 9, (a) => mx.arcsinh(a)),
  unary('Acosh', 9, (a) => mx.arccosh(a)),
  unary('Atanh', 9, (a) => mx.arctanh(a)),
  unary('Tanh', 6, (a) => mx.ext.fusedActivation(a, null, 'tanh')),
  unary('Erf', 9, (a) => mx.ext.fusedActivation(a, null, 'erf')),
  unary('Sigmoid', 6, (a) => mx.ext.fusedActivation(a, null, 'sigmoid')),
  // x where it is not below 0: -0 and NaN stay as they are, as onnxruntime's max(x, 0) keeps them.
  // One primitive. The zero first: MLX's maximum(x, y) returns x only where x > y or x is NaN, so
  // maximum(0, a) gives a at a NaN and at -0 (onnxruntime's Relu keeps both; float-edges.test.ts).
  unary('Relu', 6, (a) => (a.dtype === 'bool' || a.dtype.startsWith('u') ? a : mx.maximum(mx.scalar(0, a.dtype), a))),
  onnxOp('IsNaN', 9, { run: (ctx) => [mx.isnan(ctx.input(0))] }),
  isInfEntry,
  legacyClipEntry,
  clipEntry,
  whereEntry,
  castEntry('Cast', 6),
  castEntry('CastLike', 15),
];
