// ai.onnx.ml ops that are small: LabelEncoder (1, 2, 4), Binarizer (1), ArrayFeatureExtractor (1).
// LabelEncoder is a host lookup table (its keys may be strings, which MLX cannot hold); Binarizer
// and ArrayFeatureExtractor on numbers are MLX ops, with a host path for strings.
import * as mx from '@mlx/core';
import { checkedIndices } from '../helpers/bounds.js';
import { OnnxDataType, allocHost, type HostData, type HostTensor } from '../../onnx/index.js';
import type { Attrs } from '../../registry/attrs.js';
import type { OpContext, OpEntry } from '../../registry/types.js';
import { mlOp } from '../../registry/op.js';
import { hostNumbers } from '../helpers/util.js';
import { stringTensor } from '../helpers/strings.js';

// ---------------------------------------------------------------------------------------------
// LabelEncoder

interface Table {
  /** Key (by keyOf) -> value; a repeated key: the last one wins (the spec), which Map insertion order gives. */
  map: Map<unknown, unknown>;
  fallback: unknown;
  outType: number;
  /** The element type the input must have (opset 2+). */
  keyType?: number;
}

/** Keys compare by value: int64 inputs arrive as bigint, keys_int64s as numbers; NaN matches NaN (Map's SameValueZero). */
const keyOf = (v: unknown): unknown => (typeof v === 'bigint' ? Number(v) : v);

function table(keys: unknown[], values: unknown[], fallback: unknown, outType: number, keyType?: number): Table {
  return { map: new Map(keys.map((k, i) => [keyOf(k), values[i]])), fallback, outType, keyType };
}

const tensorValues = (t: HostTensor): unknown[] => Array.from(t.data as ArrayLike<unknown>);

function keysOf(a: Attrs): { keys: unknown[]; type: number } | undefined {
  if (a.has('keys_strings')) return { keys: a.strings('keys_strings'), type: OnnxDataType.STRING };
  if (a.has('keys_int64s')) return { keys: a.ints('keys_int64s'), type: OnnxDataType.INT64 };
  if (a.has('keys_floats')) return { keys: a.floats('keys_floats'), type: OnnxDataType.FLOAT };
  const t = a.tensor('keys_tensor');
  return t && { keys: tensorValues(t), type: t.dtype };
}

/** The default value of a values type when no default_* attribute says otherwise (the spec's table). */
function typeDefault(type: number): unknown {
  if (type === OnnxDataType.STRING) return '_Unused';
  if (type === OnnxDataType.FLOAT || type === OnnxDataType.DOUBLE) return -0;
  return -1;
}

function valuesOf(a: Attrs): { values: unknown[]; fallback: unknown; outType: number } | undefined {
  if (a.has('values_strings'))
    return { values: a.strings('values_strings'), fallback: a.string('default_string', '_Unused'), outType: OnnxDataType.STRING };
  if (a.has('values_int64s')) return { values: a.ints('values_int64s'), fallback: a.int('default_int64', -1), outType: OnnxDataType.INT64 };
  if (a.has('values_floats'))
    return { values: a.floats('values_floats'), fallback: a.float('default_float', -0), outType: OnnxDataType.FLOAT };
  const t = a.tensor('values_tensor');
  if (!t) return undefined;
  const d = a.tensor('default_tensor');
  return { values: tensorValues(t), fallback: d ? tensorValues(d)[0] : typeDefault(t.dtype), outType: t.dtype };
}

/**
 * The lookup table of opset 2+; opset 1 maps strings to their index in classes_strings, or int64
 * indices back to strings, whichever the input is: both tables.
 */
type LabelEncoderParams = Table | { fromStrings: Table; fromIndices: Table };

function parseLabelEncoder(a: Attrs, opset: number): LabelEncoderParams {
  if (opset < 2) {
    const classes = a.strings('classes_strings', []);
    const idx = classes.map((_, i) => i);
    return {
      fromStrings: table(classes, idx, a.int('default_int64', -1), OnnxDataType.INT64),
      fromIndices: table(idx, classes, a.string('default_string', '_Unused'), OnnxDataType.STRING),
    };
  }
  const k = keysOf(a),
    v = valuesOf(a);
  if (!k) throw new TypeError('LabelEncoder needs one keys_* attribute');
  if (!v) throw new TypeError('LabelEncoder needs one values_* attribute');
  if (k.keys.length !== v.values.length) throw new RangeError(`LabelEncoder has ${k.keys.length} keys but ${v.values.length} values`);
  return table(k.keys, v.values, v.fallback, v.outType, k.type);
}

/** The table for an input of `inputType`, or why that input does not fit. */
function tableFor(p: LabelEncoderParams, inputType: number | undefined): Table | string {
  if ('fromStrings' in p) return inputType === OnnxDataType.STRING ? p.fromStrings : p.fromIndices;
  if (inputType !== undefined && inputType !== p.keyType)
    return `the input's element type ${inputType} differs from the keys' type ${p.keyType}`;
  return p;
}

function outputData(type: number, values: unknown[]): HostData {
  const out = allocHost(type, values.length);
  const big = out instanceof BigInt64Array || out instanceof BigUint64Array;
  values.forEach((v, i) => ((out as unknown[])[i] = big ? BigInt(v as number | bigint) : typeof v === 'bigint' ? Number(v) : v));
  return out;
}

function labelEncode(ctx: OpContext<LabelEncoderParams>): HostTensor[] {
  const x = ctx.host(0);
  const t = tableFor(ctx.params, x.dtype);
  if (typeof t === 'string') throw new TypeError(`${ctx.where}: ${t}`);
  const xs = Array.from(x.data as ArrayLike<unknown>, (v) => (t.map.has(keyOf(v)) ? t.map.get(keyOf(v)) : t.fallback));
  return [{ dtype: t.outType, dims: [...x.dims], data: outputData(t.outType, xs) }];
}

const labelEncoder = (since: number, until?: number): OpEntry<LabelEncoderParams> =>
  mlOp('LabelEncoder', since, {
    until,
    parse: parseLabelEncoder,
    check: (ctx) => {
      const t = tableFor(ctx.params, ctx.inputType(0));
      return typeof t === 'string' ? t : undefined;
    },
    placement: 'host',
    host: labelEncode,
  });

// ---------------------------------------------------------------------------------------------
// Binarizer and ArrayFeatureExtractor

const binarizer = mlOp('Binarizer', 1, {
  parse: (attrs) => attrs.float('threshold', 0),
  // A JS-number threshold is a weak scalar, so integer inputs compare with a fractional threshold exactly.
  run: (ctx) => {
    const x = ctx.input(0);
    return [mx.astype(mx.greater(x, ctx.params), x.dtype)];
  },
});

/**
 * Gathers the last axis at `indices` (flattened). A 1-D input gives a [1, K] output, as
 * onnxruntime does (the reference implementation documents the same choice).
 */
function featureShape(xDims: readonly number[], k: number): number[] {
  return xDims.length === 1 ? [1, k] : [...xDims.slice(0, -1), k];
}

function extractStrings(ctx: OpContext): HostTensor {
  const x = ctx.host(0);
  const xs = x.data as string[];
  const idx = hostNumbers(ctx.host(1));
  const c = x.dims[x.dims.length - 1] ?? 1;
  const rows = xs.length / Math.max(c, 1);
  const bad = idx.find((i) => i < 0 || i >= c);
  if (bad !== undefined) throw new RangeError(`${ctx.where}: index ${bad} is out of range for ${c} features`);
  const out: string[] = [];
  for (let r = 0; r < rows; r++) for (const i of idx) out.push(xs[r * c + i]);
  return stringTensor(out, featureShape(x.dims, idx.length));
}

const arrayFeatureExtractor: OpEntry = mlOp('ArrayFeatureExtractor', 1, {
  run: (ctx) => {
    const c = ctx.shape(0).at(-1) ?? 1;
    const idxHost = ctx.hostIfKnown(1);
    const bad = idxHost && hostNumbers(idxHost).find((i) => i < 0 || i >= c);
    if (bad !== undefined) throw new RangeError(`${ctx.where}: index ${bad} is out of range for ${c} features`);
    if (ctx.elemType(0) === OnnxDataType.STRING) return [extractStrings(ctx)];
    const idx = checkedIndices(ctx, mx.flatten(ctx.input(1)), c, `ArrayFeatureExtractor over ${c} features`, { negative: false });
    return [mx.reshape(mx.take(ctx.input(0), idx, -1), featureShape(ctx.shape(0), idx.size))];
  },
});

export const mlOps: OpEntry[] = [labelEncoder(1, 1), labelEncoder(2), binarizer, arrayFeatureExtractor];
