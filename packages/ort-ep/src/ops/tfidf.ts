// TfIdfVectorizer (opset 9): counts the pool's n-grams (with skips) in each row of X and weights
// the counts. Token matching is hash lookups over data values (ints or strings), so it is host
// code; the output is a small float matrix.
import { OnnxDataType, type HostTensor } from '../onnx/index.js';
import type { Attrs } from '../registry/attrs.js';
import type { CheckContext, OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { RefusedNodeError } from '../errors.js';
import { checkHostElements } from './helpers/bounds.js';

const SEP = '\u0000'; // joins the tokens of an n-gram into one Map key; cannot occur in an int token

interface Vocabulary {
  /** n-gram key -> output column. */
  columns: Map<string, number>;
  width: number;
  minN: number;
  maxN: number;
  maxSkip: number;
  mode: string;
  /** Weight per output column: weights[j] of the pool n-gram j that the column counts. */
  columnWeights: number[] | undefined;
}

/**
 * The pool lists all 1-grams, then all 2-grams, ...; ngram_counts[i] is where the (i+1)-grams
 * start. The j-th n-gram of the pool (over every size, in order) goes to column ngram_indexes[j];
 * sizes outside [min_gram_length, max_gram_length] still take their j's but are never counted.
 * weights[j] belongs to the j-th pool n-gram (the spec, and onnxruntime); the Python reference
 * indexes weights by output column instead, which agrees only when ngram_indexes is 0, 1, 2, ...
 */
function vocabularyOf(a: Attrs): Vocabulary {
  const mode = a.string('mode');
  if (!['TF', 'IDF', 'TFIDF'].includes(mode)) throw new RangeError(`mode '${mode}' is not one of TF, IDF, TFIDF`);
  const pool: string[] = a.has('pool_strings') ? a.strings('pool_strings') : a.ints('pool_int64s', []).map(String);
  const counts = a.ints('ngram_counts');
  const indexes = a.ints('ngram_indexes');
  const minN = a.int('min_gram_length'),
    maxN = a.int('max_gram_length');
  const weights = a.floats('weights', []);
  const columns = new Map<string, number>();
  const width = indexes.reduce((m, i) => Math.max(m, i + 1), 0);
  const columnWeights = weights.length ? new Array<number>(width).fill(1) : undefined;
  // onnxruntime's CPU kernel reads these without bounds (it aborts the process on them), so they
  // are refused here rather than handed to the fallback.
  counts.forEach((start, i) => {
    const end = i + 1 < counts.length ? counts[i + 1] : pool.length;
    if (!(start >= 0 && start <= end && end <= pool.length))
      throw new RefusedNodeError(`ngram_counts [${counts.join(', ')}] are not ascending offsets into a pool of ${pool.length}`);
  });
  const bad = indexes.find((x) => x < 0);
  if (bad !== undefined) throw new RefusedNodeError(`ngram_indexes holds ${bad}, a negative column`);
  let j = 0;
  counts.forEach((start, i) => {
    const n = i + 1;
    const end = i + 1 < counts.length ? counts[i + 1] : pool.length;
    for (let p = start; p + n <= end; p += n, j++) {
      if (j >= indexes.length) throw new RefusedNodeError(`ngram_indexes has ${indexes.length} entries, the pool more n-grams`);
      if (n < minN || n > maxN) continue;
      columns.set(pool.slice(p, p + n).join(SEP), indexes[j]);
      if (columnWeights) columnWeights[indexes[j]] = weights[j] ?? 1;
    }
  });
  return {
    columns,
    width,
    minN,
    maxN,
    maxSkip: a.int('max_skip_count', 0),
    mode,
    columnWeights,
  };
}

/** Counts of one row: every n in [minN, maxN], every gap up to maxSkip (1-grams have no gaps). */
function countRow(tokens: string[], v: Vocabulary, counts: Float64Array): void {
  for (let n = Math.max(v.minN, 1); n <= v.maxN; n++) {
    const skips = n === 1 ? 0 : v.maxSkip;
    for (let skip = 0; skip <= skips; skip++) {
      const step = skip + 1;
      for (let s = 0; s + (n - 1) * step < tokens.length; s++) {
        const gram: string[] = [];
        for (let k = 0; k < n; k++) gram.push(tokens[s + k * step]);
        const col = v.columns.get(gram.join(SEP));
        if (col !== undefined) counts[col]++;
      }
    }
  }
}

function weigh(counts: Float64Array, v: Vocabulary): void {
  const w = v.columnWeights;
  counts.forEach((c, i) => {
    if (v.mode === 'IDF') counts[i] = c > 0 ? (w ? w[i] : 1) : 0;
    else if (v.mode === 'TFIDF') counts[i] = w ? w[i] * c : c;
  });
}

function vectorize(ctx: OpContext<Vocabulary>): HostTensor[] {
  const v = ctx.params;
  const x = ctx.host(0);
  if (x.dims.length > 2) throw new RangeError(`${ctx.where}: X must be [C] or [N, C], got [${x.dims.join(', ')}]`);
  const tokens = Array.from(x.data as ArrayLike<unknown>, String);
  const [rows, c] = x.dims.length === 2 ? x.dims : [1, x.dims[0] ?? 1];
  // The output is as wide as the largest of ngram_indexes, whatever the pool holds.
  checkHostElements(rows * v.width, `an output of ${rows} row(s) of ${v.width} columns (ngram_indexes up to ${v.width - 1})`);
  const out = new Float32Array(rows * v.width);
  for (let r = 0; r < rows; r++) {
    const counts = new Float64Array(v.width);
    countRow(tokens.slice(r * c, (r + 1) * c), v, counts);
    weigh(counts, v);
    out.set(counts, r * v.width);
  }
  return [{ dtype: OnnxDataType.FLOAT, dims: x.dims.length === 2 ? [rows, v.width] : [v.width], data: out }];
}

function check(ctx: CheckContext<Vocabulary>): string | undefined {
  const t = ctx.inputType(0);
  if (t !== undefined && ![OnnxDataType.STRING, OnnxDataType.INT32, OnnxDataType.INT64].includes(t))
    return `X must be string, int32 or int64, got element type ${t}`;
  return undefined;
}

export const tfIdfOps: OpEntry[] = [
  onnxOp('TfIdfVectorizer', 9, { parse: vocabularyOf, placement: 'host', check, host: vectorize, note: 'host' }),
];
