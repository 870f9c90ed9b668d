// ai.onnx.ml preprocessing ops on the host, as onnxruntime's CPU kernels compute them (float32
// outputs): Scaler, Normalizer, Imputer, OneHotEncoder, FeatureVectorizer and CategoryMapper.
// Exported scikit-learn pipelines use them on small feature rows, often next to strings.
import { OnnxDataType, type HostTensor } from '../../onnx/index.js';
import type { Attrs } from '../../registry/attrs.js';
import type { OpContext, OpEntry } from '../../registry/types.js';
import { mlOp } from '../../registry/op.js';
import { checkHostElements } from '../helpers/bounds.js';
import { hostFloats } from '../helpers/shape-host.js';
import { float32Tensor } from '../helpers/ml-scores.js';
import { stringTensor } from '../helpers/strings.js';

const f = Math.fround;
const NUMERIC = new Set<number>([OnnxDataType.FLOAT, OnnxDataType.DOUBLE, OnnxDataType.INT64, OnnxDataType.INT32]);

function numericCheck(op: string, types: (number | undefined)[]): string | undefined {
  const bad = types.find((t) => t !== undefined && !NUMERIC.has(t));
  return bad === undefined ? undefined : `${op} takes float, double, int64 or int32 inputs, not element type ${bad}`;
}

/** [rows, columns] of a 1-D or 2-D input. */
function matrixOf(x: HostTensor, where: string): [number, number] {
  if (x.dims.length > 2) throw new RangeError(`${where}: the input must be 1-D or 2-D, not ${x.dims.length}-D`);
  return x.dims.length === 1 ? [1, x.dims[0]] : [x.dims[0] ?? 1, x.dims[1] ?? 1];
}

// ---------------------------------------------------------------------------------------------
// Scaler: (x - offset) · scale, offset and scale one value or one per column.

interface ScalerParams {
  offset: number[];
  scale: number[];
}

function scaler(ctx: OpContext<ScalerParams>): HostTensor[] {
  const x = ctx.host(0);
  const { offset, scale } = ctx.params;
  const cols = x.dims.at(-1) ?? 1;
  for (const [name, v] of [
    ['offset', offset],
    ['scale', scale],
  ] as const)
    if (v.length !== 1 && v.length !== cols) throw new RangeError(`${ctx.where}: ${v.length} ${name} values for ${cols} columns`);
  const xs = hostFloats(x);
  const wide = x.dtype === OnnxDataType.DOUBLE;
  const y = Float32Array.from(xs, (v, i) => {
    const c = i % cols;
    const o = offset[offset.length === 1 ? 0 : c];
    const s = scale[scale.length === 1 ? 0 : c];
    return wide ? (v - o) * s : f(f(f(v) - o) * s);
  });
  return [float32Tensor(y, [...x.dims])];
}

// ---------------------------------------------------------------------------------------------
// Normalizer: each row divided by its MAX, L1 or L2 norm (rows with a zero norm unchanged).

function normalizer(ctx: OpContext<string>): HostTensor[] {
  const x = ctx.host(0);
  const [rows, cols] = matrixOf(x, ctx.where);
  const xs = hostFloats(x).map(f);
  const y = new Float32Array(xs.length);
  for (let r = 0; r < rows; r++) {
    const row = xs.slice(r * cols, (r + 1) * cols);
    let norm = 0;
    if (ctx.params === 'MAX') norm = row.reduce((a, b) => Math.max(a, b), -3.4028234663852886e38);
    else if (ctx.params === 'L1') for (const v of row) norm = f(norm + Math.abs(v));
    else for (const v of row) norm = f(norm + f(v * v));
    for (let c = 0; c < cols; c++) {
      const v = row[c];
      if (norm === 0) y[r * cols + c] = v;
      else if (ctx.params === 'L2') y[r * cols + c] = Math.sign(v) * Math.sqrt(f(f(v * v) / norm)) || 0;
      else y[r * cols + c] = v / norm;
    }
  }
  return [float32Tensor(y, [...x.dims])];
}

function parseNorm(attrs: Attrs): string {
  const n = attrs.string('norm', 'MAX');
  if (n !== 'MAX' && n !== 'L1' && n !== 'L2') throw new RangeError(`Normalizer norm '${n}' is not MAX, L1 or L2`);
  return n;
}

// ---------------------------------------------------------------------------------------------
// Imputer: values equal to the replaced value (NaN matches NaN) become the imputed value of
// their column (or the single imputed value).

interface ImputerParams {
  floats?: number[];
  ints?: number[];
  replacedFloat: number;
  replacedInt: number;
}

function parseImputer(attrs: Attrs): ImputerParams {
  const p: ImputerParams = {
    floats: attrs.has('imputed_value_floats') ? attrs.floats('imputed_value_floats') : undefined,
    ints: attrs.has('imputed_value_int64s') ? attrs.ints('imputed_value_int64s') : undefined,
    replacedFloat: attrs.float('replaced_value_float', 0),
    replacedInt: attrs.int('replaced_value_int64', 0),
  };
  if (!p.floats?.length && !p.ints?.length) throw new RangeError('Imputer needs imputed_value_floats or imputed_value_int64s');
  return p;
}

function imputer(ctx: OpContext<ImputerParams>): HostTensor[] {
  const x = ctx.host(0);
  const p = ctx.params;
  const cols = x.dims.at(-1) ?? 1;
  const isInt = x.dtype === OnnxDataType.INT64;
  const imputed = isInt ? p.ints : p.floats;
  if (!imputed?.length) throw new TypeError(`${ctx.where}: no imputed values of the input's type (${isInt ? 'int64' : 'float'})`);
  if (imputed.length !== 1 && imputed.length !== cols)
    throw new RangeError(`${ctx.where}: ${imputed.length} imputed values for ${cols} columns`);
  const pick = (i: number) => imputed[imputed.length === 1 ? 0 : i % cols];
  if (isInt) {
    const xs = x.data as BigInt64Array;
    const r = BigInt(p.replacedInt);
    return [{ dtype: OnnxDataType.INT64, dims: [...x.dims], data: BigInt64Array.from(xs, (v, i) => (v === r ? BigInt(pick(i)) : v)) }];
  }
  const xs = hostFloats(x);
  const r = f(p.replacedFloat);
  const y = Float32Array.from(xs, (v, i) => (v === r || (Number.isNaN(r) && Number.isNaN(v)) ? pick(i) : v));
  return [float32Tensor(y, [...x.dims])];
}

// ---------------------------------------------------------------------------------------------
// OneHotEncoder: each value becomes a row of len(cats) with a 1 at its category (an unknown
// value: a zero row, or an error with zeros=0). Numbers compare as int64 (truncated).

interface OneHotParams {
  cats: Map<string | number, number>;
  count: number;
  strings: boolean;
  zeros: boolean;
}

function parseOneHot(attrs: Attrs): OneHotParams {
  const strings = attrs.has('cats_strings');
  if (strings === attrs.has('cats_int64s')) throw new RangeError('OneHotEncoder needs exactly one of cats_strings and cats_int64s');
  const list: (string | number)[] = strings ? attrs.strings('cats_strings') : attrs.ints('cats_int64s');
  const cats = new Map<string | number, number>();
  list.forEach((c, i) => {
    if (!cats.has(c)) cats.set(c, i);
  });
  return { cats, count: list.length, strings, zeros: attrs.int('zeros', 1) !== 0 };
}

function oneHot(ctx: OpContext<OneHotParams>): HostTensor[] {
  const x = ctx.host(0);
  const p = ctx.params;
  const isString = x.dtype === OnnxDataType.STRING;
  if (isString !== p.strings)
    throw new TypeError(`${ctx.where}: ${isString ? 'string' : 'numeric'} input but ${p.strings ? 'string' : 'int64'} categories`);
  const values: (string | number)[] = isString ? (x.data as string[]) : hostFloats(x).map(Math.trunc);
  checkHostElements(values.length * p.count, `${ctx.where}: the output of ${values.length} value(s) x ${p.count} categories`);
  const y = new Float32Array(values.length * p.count);
  values.forEach((v, i) => {
    const c = p.cats.get(v);
    if (c !== undefined) y[i * p.count + c] = 1;
    else if (!p.zeros) throw new RangeError(`${ctx.where}: ${JSON.stringify(v)} is not a category (and zeros is 0)`);
  });
  return [float32Tensor(y, [...x.dims, p.count])];
}

// ---------------------------------------------------------------------------------------------
// FeatureVectorizer: inputs [N, Ci] side by side, each cut or zero-padded to inputdimensions[i].

function featureVectorizer(ctx: OpContext<number[]>): HostTensor[] {
  const widths = ctx.params;
  if (widths.length !== ctx.inputCount) throw new RangeError(`${ctx.where}: ${ctx.inputCount} inputs but ${widths.length} inputdimensions`);
  const bad = widths.find((w) => !Number.isSafeInteger(w) || w < 0);
  if (bad !== undefined) throw new RangeError(`inputdimensions [${widths.join(', ')}] has ${bad}, not a non-negative integer`);
  const total = widths.reduce((a, b) => a + b, 0);
  const inputs = widths.map((_, i) => ctx.host(i));
  const rows = inputs[0].dims.length <= 1 ? 1 : inputs[0].dims[0];
  checkHostElements(rows * total, `the output [${rows}, ${total}]`);
  const y = new Float32Array(rows * total);
  let at = 0;
  inputs.forEach((x, i) => {
    const xRows = x.dims.length <= 1 ? 1 : x.dims[0];
    if (xRows !== rows) throw new RangeError(`${ctx.where}: input ${i} has ${xRows} rows, input 0 ${rows}`);
    const cols = x.dims.length === 0 ? 1 : x.dims.slice(x.dims.length === 1 ? 0 : 1).reduce((a, b) => a * b, 1);
    const xs = hostFloats(x);
    for (let r = 0; r < rows; r++) for (let c = 0; c < Math.min(cols, widths[i]); c++) y[r * total + at + c] = xs[r * cols + c];
    at += widths[i];
  });
  return [float32Tensor(y, [rows, total])];
}

// ---------------------------------------------------------------------------------------------
// CategoryMapper: strings to int64 and int64 to strings through two parallel lists.

interface CategoryParams {
  toInt: Map<string, number>;
  toString: Map<number, string>;
  defaultString: string;
  defaultInt: number;
}

function parseCategory(attrs: Attrs): CategoryParams {
  const strings = attrs.strings('cats_strings');
  const ints = attrs.ints('cats_int64s');
  if (strings.length !== ints.length)
    throw new RangeError(`CategoryMapper has ${strings.length} cats_strings but ${ints.length} cats_int64s`);
  return {
    toInt: new Map(strings.map((s, i) => [s, ints[i]])),
    toString: new Map(ints.map((n, i) => [n, strings[i]])),
    defaultString: attrs.string('default_string', '_Unused'),
    defaultInt: attrs.int('default_int64', -1),
  };
}

function categoryMapper(ctx: OpContext<CategoryParams>): HostTensor[] {
  const x = ctx.host(0);
  const p = ctx.params;
  if (x.dtype === OnnxDataType.STRING) {
    const data = BigInt64Array.from(x.data as string[], (s) => BigInt(p.toInt.get(s) ?? p.defaultInt));
    return [{ dtype: OnnxDataType.INT64, dims: [...x.dims], data }];
  }
  if (x.dtype !== OnnxDataType.INT64) throw new TypeError(`${ctx.where}: the input must be string or int64`);
  return [
    stringTensor(
      hostFloats(x).map((n) => p.toString.get(n) ?? p.defaultString),
      x.dims,
    ),
  ];
}

export const preprocessOps: OpEntry[] = [
  mlOp('Scaler', 1, {
    parse: (attrs) => ({ offset: attrs.floats('offset', [0]), scale: attrs.floats('scale', [1]) }),
    check: (ctx) => numericCheck('Scaler', [ctx.inputType(0)]),
    placement: 'host',
    host: scaler,
  }),
  mlOp('Normalizer', 1, {
    parse: parseNorm,
    check: (ctx) => numericCheck('Normalizer', [ctx.inputType(0)]),
    placement: 'host',
    host: normalizer,
  }),
  mlOp('Imputer', 1, { parse: parseImputer, placement: 'host', host: imputer }),
  mlOp('OneHotEncoder', 1, { parse: parseOneHot, placement: 'host', host: oneHot }),
  mlOp('FeatureVectorizer', 1, {
    parse: (attrs) => attrs.ints('inputdimensions'),
    check: (ctx) =>
      numericCheck(
        'FeatureVectorizer',
        ctx.node.inputs.map((_, i) => ctx.inputType(i)),
      ),
    placement: 'host',
    host: featureVectorizer,
  }),
  mlOp('CategoryMapper', 1, { parse: parseCategory, placement: 'host', host: categoryMapper }),
];
