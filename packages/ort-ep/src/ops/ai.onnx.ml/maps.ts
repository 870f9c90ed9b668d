// ai.onnx.ml ops on map values (runtime/value.ts's MapValue): ZipMap (a tensor's rows to a sequence
// of maps), DictVectorizer and CastMap (a map to a tensor). onnxruntime's CPU kernels are the
// behavioural reference where the spec leaves things open: its maps are std::maps (unique keys,
// ascending; a repeated key keeps its last value), DictVectorizer and CastMap give [1, N] tensors,
// CastMap pads strings with "0.f" and writes floats as C's "%f". Host code: maps are host values.
import { OnnxDataType, allocHost, dataTypeName, type HostTensor } from '../../onnx/index.js';
import type { Attrs } from '../../registry/attrs.js';
import type { CheckContext, OpContext, OpEntry } from '../../registry/types.js';
import { mlOp } from '../../registry/op.js';
import type { MapValue, Value } from '../../runtime/value.js';
import { checkHostElements } from '../helpers/bounds.js';

type Key = bigint | string;

const utf8 = new TextEncoder();
/** Key order: int64 keys by value, string keys by their UTF-8 bytes (std::string's order). */
function compareKeys(a: Key, b: Key): number {
  if (typeof a === 'bigint' && typeof b === 'bigint') return a < b ? -1 : a > b ? 1 : 0;
  return Buffer.compare(utf8.encode(String(a)), utf8.encode(String(b)));
}

/** The entries of a map, keys unique (the last of a repeated key wins), checked against the map's own shape. */
export function mapEntries(v: Value, where: string): { keyType: number; valueType: number; entries: Map<Key, unknown> } {
  if (v.kind !== 'map')
    throw new TypeError(`${where}: expected a map, got a ${v.kind === 'host' || v.kind === 'device' ? 'tensor' : v.kind}`);
  const { keys, values } = v;
  if (keys.dtype !== OnnxDataType.INT64 && keys.dtype !== OnnxDataType.STRING)
    throw new TypeError(`${where}: map keys must be int64 or string, got ${dataTypeName(keys.dtype)}`);
  if (keys.dims.length !== 1 || values.dims.length !== 1 || keys.data.length !== values.data.length || keys.dims[0] !== keys.data.length)
    throw new RangeError(
      `${where}: a map needs 1-D keys and values of one length, got [${keys.dims.join(', ')}] and [${values.dims.join(', ')}]`,
    );
  const entries = new Map<Key, unknown>();
  const k = keys.data as ArrayLike<Key>;
  const x = values.data as ArrayLike<unknown>;
  for (let i = 0; i < keys.data.length; i++) entries.set(k[i], x[i]);
  return { keyType: keys.dtype, valueType: values.dtype, entries };
}

/** A map Value from entries: keys sorted and unique. */
export function makeMap(keyType: number, valueType: number, entries: Map<Key, unknown>): MapValue {
  const sorted = [...entries.keys()].sort(compareKeys);
  const keys = allocHost(keyType, sorted.length);
  const values = allocHost(valueType, sorted.length);
  sorted.forEach((key, i) => {
    (keys as unknown[])[i] = key;
    (values as unknown[])[i] = entries.get(key);
  });
  return {
    kind: 'map',
    keys: { dtype: keyType, dims: [sorted.length], data: keys },
    values: { dtype: valueType, dims: [sorted.length], data: values },
  };
}

// ---------------------------------------------------------------------------------------------
// ZipMap

interface ZipLabels {
  labels: Key[];
  keyType: number;
}

function parseZip(a: Attrs): ZipLabels {
  const s = a.has('classlabels_strings'),
    i = a.has('classlabels_int64s');
  if (s === i) throw new RangeError('exactly one of classlabels_strings and classlabels_int64s must be given');
  return s
    ? { labels: a.strings('classlabels_strings'), keyType: OnnxDataType.STRING }
    : { labels: a.ints('classlabels_int64s').map(BigInt), keyType: OnnxDataType.INT64 };
}

function zipMap(ctx: OpContext<ZipLabels>): Value[] {
  const { labels, keyType } = ctx.params;
  const x = ctx.host(0);
  if (x.dtype !== OnnxDataType.FLOAT) throw new TypeError(`X must be float, got ${dataTypeName(x.dtype)}`);
  if (x.dims.length < 1 || x.dims.length > 2) throw new RangeError(`X must be 1-D or 2-D, got [${x.dims.join(', ')}]`);
  const rows = x.dims.length === 2 ? x.dims[0] : 1;
  const c = x.dims[x.dims.length - 1];
  if (c !== labels.length) throw new RangeError(`X has ${c} values per row, the class labels number ${labels.length}`);
  checkHostElements(rows * c, `a sequence of ${rows} map(s) of ${c} entries`);
  const data = x.data as Float32Array;
  const items: Value[] = [];
  for (let r = 0; r < rows; r++) {
    const entries = new Map<Key, unknown>();
    labels.forEach((label, j) => entries.set(label, data[r * c + j]));
    items.push(makeMap(keyType, OnnxDataType.FLOAT, entries));
  }
  return [{ kind: 'sequence', items, elemType: OnnxDataType.UNDEFINED }];
}

// ---------------------------------------------------------------------------------------------
// DictVectorizer

interface Vocabulary {
  words: Key[];
  keyType: number;
}

function parseVocabulary(a: Attrs): Vocabulary {
  const s = a.has('string_vocabulary'),
    i = a.has('int64_vocabulary');
  if (s === i) throw new RangeError('exactly one of string_vocabulary and int64_vocabulary must be given');
  return s
    ? { words: a.strings('string_vocabulary'), keyType: OnnxDataType.STRING }
    : { words: a.ints('int64_vocabulary').map(BigInt), keyType: OnnxDataType.INT64 };
}

const DICT_VALUE_TYPES = [OnnxDataType.INT64, OnnxDataType.FLOAT, OnnxDataType.DOUBLE, OnnxDataType.STRING];

function dictVectorizer(ctx: OpContext<Vocabulary>): HostTensor[] {
  const { words, keyType } = ctx.params;
  const m = mapEntries(ctx.value(0), 'X');
  if (m.keyType !== keyType)
    throw new TypeError(
      `X has ${dataTypeName(m.keyType)} keys, the vocabulary (${keyType === OnnxDataType.STRING ? 'string' : 'int64'}_vocabulary) ${dataTypeName(keyType)} ones`,
    );
  if (!DICT_VALUE_TYPES.includes(m.valueType))
    throw new TypeError(`X's values must be int64, float, double or string, got ${dataTypeName(m.valueType)}`);
  checkHostElements(words.length, `an output of ${words.length} columns`);
  const out = allocHost(m.valueType, words.length) as unknown[];
  // A key missing from the map is the type's zero (an empty string), as onnxruntime's TargetType().
  const zero = m.valueType === OnnxDataType.STRING ? '' : m.valueType === OnnxDataType.INT64 ? 0n : 0;
  words.forEach((w, i) => {
    out[i] = m.entries.has(w) ? m.entries.get(w) : zero;
  });
  return [{ dtype: m.valueType, dims: [1, words.length], data: out as never }];
}

// ---------------------------------------------------------------------------------------------
// CastMap

interface CastMapParams {
  to: number;
  dense: boolean;
  maxMap: number;
}

function parseCastMap(a: Attrs): CastMapParams {
  const castTo = a.string('cast_to', 'TO_FLOAT');
  const to = { TO_FLOAT: OnnxDataType.FLOAT, TO_STRING: OnnxDataType.STRING, TO_INT64: OnnxDataType.INT64 }[castTo];
  if (to === undefined) throw new RangeError(`cast_to '${castTo}' is not one of TO_FLOAT, TO_STRING, TO_INT64`);
  const form = a.string('map_form', 'DENSE');
  if (form !== 'DENSE' && form !== 'SPARSE') throw new RangeError(`map_form '${form}' is not one of DENSE, SPARSE`);
  const maxMap = a.int('max_map', 1);
  if (form === 'SPARSE' && !(maxMap >= 0)) throw new RangeError(`max_map must be >= 0, got ${maxMap}`);
  return { to, dense: form === 'DENSE', maxMap };
}

/** C's "%f" of a double (six decimals, the exact value rounded half to even), as std::to_string writes it. */
export function formatFixed6(x: number): string {
  if (Number.isNaN(x)) return x < 0 ? '-nan' : 'nan';
  if (!Number.isFinite(x)) return x < 0 ? '-inf' : 'inf';
  const negative = x < 0 || Object.is(x, -0);
  const buf = new DataView(new ArrayBuffer(8));
  buf.setFloat64(0, Math.abs(x));
  const bits = buf.getBigUint64(0);
  const expBits = Number((bits >> 52n) & 0x7ffn);
  const frac = bits & ((1n << 52n) - 1n);
  // |x| = mant * 2^exp exactly.
  const mant = expBits === 0 ? frac : frac | (1n << 52n);
  const exp = expBits === 0 ? -1074 : expBits - 1075;
  let q: bigint;
  if (exp >= 0) q = (mant << BigInt(exp)) * 1000000n;
  else {
    const num = mant * 1000000n;
    const den = 1n << BigInt(-exp);
    q = num / den;
    const r2 = (num % den) * 2n;
    if (r2 > den || (r2 === den && q % 2n === 1n)) q += 1n;
  }
  const digits = q.toString().padStart(7, '0');
  return `${negative ? '-' : ''}${digits.slice(0, -6)}.${digits.slice(-6)}`;
}

/** std::stof / std::stoll: the longest numeric prefix after leading white space; none is an error. */
function parseNumber(s: string, to: number): number | bigint {
  const t = s.replace(/^[\s]+/, '');
  if (to === OnnxDataType.INT64) {
    const m = /^[+-]?\d+/.exec(t);
    if (!m) throw new RangeError(`'${s}' is not an integer (std::stoll)`);
    const v = BigInt(m[0]);
    if (v < -(2n ** 63n) || v >= 2n ** 63n) throw new RangeError(`'${s}' is out of the int64 range (std::stoll)`);
    return v;
  }
  const m = /^[+-]?(?:inf(?:inity)?|nan|(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)/i.exec(t);
  if (!m) throw new RangeError(`'${s}' is not a number (std::stof)`);
  const v = Math.fround(Number(/nan/i.test(m[0]) ? Number.NaN : m[0].replace(/inf(inity)?/i, 'Infinity')));
  if (!Number.isFinite(v) && !/inf|nan/i.test(m[0])) throw new RangeError(`'${s}' is out of the float range (std::stof)`);
  return v;
}

function castValue(v: unknown, from: number, to: number): unknown {
  if (from === OnnxDataType.STRING) return to === OnnxDataType.STRING ? v : parseNumber(v as string, to);
  const f = v as number;
  if (to === OnnxDataType.FLOAT) return f;
  if (to === OnnxDataType.STRING) return formatFixed6(f);
  // static_cast<int64_t>(float): truncation; a value outside int64's range (or NaN) is undefined in C++.
  if (!Number.isFinite(f) || Math.abs(f) >= 2 ** 63) throw new RangeError(`${f} does not fit int64`);
  return BigInt(Math.trunc(f));
}

function castMap(ctx: OpContext<CastMapParams>): HostTensor[] {
  const { to, dense, maxMap } = ctx.params;
  const m = mapEntries(ctx.value(0), 'X');
  if (m.keyType !== OnnxDataType.INT64) throw new TypeError(`X must have int64 keys, got ${dataTypeName(m.keyType)}`);
  if (m.valueType !== OnnxDataType.FLOAT && m.valueType !== OnnxDataType.STRING)
    throw new TypeError(`X's values must be float or string, got ${dataTypeName(m.valueType)}`);
  const keys = [...m.entries.keys()].sort(compareKeys) as bigint[];
  const n = dense ? keys.length : maxMap;
  checkHostElements(n, `an output of ${n} columns`);
  const out = allocHost(to, n) as unknown[];
  if (dense) keys.forEach((k, i) => (out[i] = castValue(m.entries.get(k), m.valueType, to)));
  else {
    if (keys.length && keys[0] < 0n) throw new RangeError(`SPARSE maps take no negative keys, got ${keys[0]}`);
    const pad = to === OnnxDataType.STRING ? '0.f' : to === OnnxDataType.INT64 ? 0n : 0;
    for (let i = 0; i < n; i++) out[i] = m.entries.has(BigInt(i)) ? castValue(m.entries.get(BigInt(i)), m.valueType, to) : pad;
  }
  return [{ dtype: to, dims: [1, n], data: out as never }];
}

const mapInput = (ctx: CheckContext<unknown>): string | undefined => {
  const t = ctx.inputType(0);
  return t !== undefined ? `X must be a map, got a tensor of ${dataTypeName(t)}` : undefined;
};

export const mapOps: OpEntry[] = [
  mlOp('ZipMap', 1, {
    parse: parseZip,
    // run(), not host(): host() returns tensors, run() any Value (as the sequence ops do); no MLX op is used.
    run: zipMap,
    note: 'host; a sequence of maps, returned through MlxSession (onnxruntime-common cannot return it)',
  }),
  mlOp('DictVectorizer', 1, { parse: parseVocabulary, placement: 'host', check: mapInput, host: dictVectorizer, note: 'host; map input' }),
  mlOp('CastMap', 1, { parse: parseCastMap, placement: 'host', check: mapInput, host: castMap, note: 'host; map input' }),
];
