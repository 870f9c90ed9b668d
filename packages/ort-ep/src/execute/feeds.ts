// A run's feeds: checked against the model's inputs before anything runs, and the donated ones
// (MlxRunOptions.donate) given up once the graph is built.
import type * as mx from '@mlx/core';
import { OnnxDataType, dataTypeName, type GraphIR, type HostTensor, type TypeIR, type ValueInfoIR } from '../onnx/index.js';
import { InvalidFeedError } from '../errors.js';
import type { Value } from '../runtime/value.js';

/**
 * Checks a run's feeds against the model's inputs before anything runs: names, element types,
 * ranks, static dimensions, element counts; map feeds' key and value types; device feeds alive.
 * Each failure is an InvalidFeedError naming the model and the input.
 */
export function validateFeeds(
  model: string,
  graph: GraphIR,
  inputNames: readonly string[],
  feeds: Record<string, HostTensor | Value>,
): void {
  const g = graph;
  const known = new Map(g.inputs.map((i) => [i.name, i]));
  for (const name of Object.keys(feeds)) {
    if (!known.has(name)) throw new InvalidFeedError(`model ${model}: unknown input '${name}' (inputs are: ${inputNames.join(', ')})`);
  }
  for (const name of inputNames) {
    if (!(name in feeds)) throw new InvalidFeedError(`model ${model}: missing input '${name}'`);
  }
  for (const [name, f] of Object.entries(feeds)) {
    const info = known.get(name)!;
    if (info.type.kind === 'map') validateMapFeed(model, name, info.type, f);
    if (info.type.kind !== 'tensor') continue;
    if ('kind' in f && f.kind === 'device') {
      validateDeviceFeed(model, name, info, f);
      continue;
    }
    if ('kind' in f && f.kind !== 'host') continue;
    const t = ('kind' in f ? f.tensor : f) as HostTensor;
    const want = info.type.elemType;
    if (want && t.dtype !== want) {
      throw new InvalidFeedError(
        `model ${model}: input '${name}' expects element type ${dataTypeName(want)}, got ${dataTypeName(t.dtype)}`,
      );
    }
    const shape = info.type.shape;
    if (!shape) continue;
    if (shape.length !== t.dims.length) {
      throw new InvalidFeedError(
        `model ${model}: input '${name}' expects rank ${shape.length} (shape [${shape.map((d) => d ?? '?').join(', ')}]), got rank ${t.dims.length} (shape [${t.dims.join(', ')}])`,
      );
    }
    shape.forEach((d, i) => {
      if (typeof d === 'number' && d >= 0 && t.dims[i] !== d) {
        throw new InvalidFeedError(
          `model ${model}: input '${name}' expects dimension ${i} to be ${d}, got ${t.dims[i]} (shape [${t.dims.join(', ')}])`,
        );
      }
    });
    const n = t.dims.reduce((a, b) => a * b, 1);
    const len = t.dtype === OnnxDataType.COMPLEX64 ? t.data.length / 2 : t.data.length;
    if (len !== n)
      throw new InvalidFeedError(`model ${model}: input '${name}' has ${len} elements but its shape [${t.dims.join(', ')}] needs ${n}`);
  }
}

/** FeedMemo's length of a device array feed (no host tensor has it). */
const DEVICE = -1;

/**
 * The last feeds a session checked and ran, by name order, element type, dims and length: a loop
 * of runs of one shape (the usual case) meets them again every run, and then validateFeeds and the
 * signature key's string building (ModelRunner) are skipped, both functions of exactly these. Host
 * tensors and device arrays (a decode loop's KV caches: by element type and shape, each still live
 * and computed, as validateFeeds requires); a run with any other value takes the full checks.
 * `key` is the runner's signature key for them, computed on their first run; `matched` the feeds
 * object the last matches() accepted (the runner reuses the key only for that very object).
 */
export class FeedMemo {
  private names: string[] = [];
  private dtypes: number[] = [];
  private dims: (readonly number[])[] = [];
  private lengths: number[] = [];
  private fetches: readonly string[] = [];
  private valid = false;
  key: string | undefined;
  matched: object | undefined;

  /** Whether `feeds` and `fetches` are, name by name in order, those of the last remember(). */
  matches(feeds: Record<string, HostTensor | Value>, fetches: readonly string[]): boolean {
    this.matched = undefined;
    if (!this.valid) return false;
    const f0 = this.fetches;
    if (fetches !== f0) {
      if (fetches.length !== f0.length) return false;
      for (let i = 0; i < f0.length; i++) if (fetches[i] !== f0[i]) return false;
    }
    const names = this.names;
    let n = 0;
    // for-in (no array made) sees inherited enumerable keys too, which remember() (own keys) never
    // holds: such feeds never match, and take the full checks.
    for (const name in feeds) {
      if (n >= names.length || names[n] !== name) return false;
      const f = feeds[name] as HostTensor | Value;
      if (!f || typeof f !== 'object') return false;
      let d: readonly number[] | undefined;
      if ('kind' in f) {
        // A device array: live, computed (validateDeviceFeed evaluates a lazy one), of the same type and shape.
        if (
          f.kind !== 'device' ||
          this.lengths[n] !== DEVICE ||
          f.onnxType !== this.dtypes[n] ||
          f.array.disposed ||
          !f.array.isAvailable()
        )
          return false;
        d = f.array.shape;
      } else {
        if (f.dtype !== this.dtypes[n] || f.data?.length !== this.lengths[n]) return false;
        d = f.dims;
      }
      const e = this.dims[n];
      if (!d || d.length !== e.length) return false;
      for (let i = 0; i < e.length; i++) if (d[i] !== e[i]) return false;
      n++;
    }
    if (n !== names.length) return false;
    this.matched = feeds;
    return true;
  }

  /** Records feeds that passed validateFeeds (forgets everything when any is neither a host tensor nor a device array). */
  remember(feeds: Record<string, HostTensor | Value>, fetches: readonly string[]): void {
    this.valid = false;
    this.key = undefined;
    this.matched = undefined;
    const names: string[] = [];
    const dtypes: number[] = [];
    const dims: number[][] = [];
    const lengths: number[] = [];
    for (const name of Object.keys(feeds)) {
      const f = feeds[name] as HostTensor | Value;
      if (!f || typeof f !== 'object') return;
      if ('kind' in f) {
        if (f.kind !== 'device') return;
        names.push(name);
        dtypes.push(f.onnxType);
        dims.push([...f.array.shape]);
        lengths.push(DEVICE);
        continue;
      }
      if (!Array.isArray(f.dims) || !f.data) return;
      names.push(name);
      dtypes.push(f.dtype);
      dims.push([...f.dims]);
      lengths.push(f.data.length);
    }
    Object.assign(this, { names, dtypes, dims, lengths, fetches: [...fetches], valid: true });
    this.matched = feeds;
  }
}

/** A map feed (ai.onnx.ml): a map Value of the input's key and value types, 1-D keys and values of one length. */
function validateMapFeed(model: string, name: string, type: Extract<TypeIR, { kind: 'map' }>, f: HostTensor | Value): void {
  const bad = (why: string) => new InvalidFeedError(`model ${model}: input '${name}' ${why}`);
  if (!('kind' in f) || f.kind !== 'map')
    throw bad(`is a map: feed { kind: 'map', keys, values } (1-D host tensors), got a ${'kind' in f ? f.kind : 'tensor'}`);
  if (f.keys.dtype !== type.keyType) throw bad(`expects ${dataTypeName(type.keyType)} keys, got ${dataTypeName(f.keys.dtype)}`);
  const valueType = type.value?.kind === 'tensor' ? type.value.elemType : undefined;
  if (valueType && f.values.dtype !== valueType)
    throw bad(`expects ${dataTypeName(valueType)} values, got ${dataTypeName(f.values.dtype)}`);
  const n = f.keys.data.length;
  if (
    f.keys.dims.length !== 1 ||
    f.values.dims.length !== 1 ||
    f.keys.dims[0] !== n ||
    f.values.dims[0] !== n ||
    f.values.data.length !== n
  )
    throw bad(
      `needs 1-D keys and values of one length, got keys [${f.keys.dims.join(', ')}] (${n} elements) and values [${f.values.dims.join(', ')}] (${f.values.data.length} elements)`,
    );
}

/** A device feed: a live array of the input's element type, rank and static dimensions. */
function validateDeviceFeed(model: string, name: string, info: ValueInfoIR, f: Extract<Value, { kind: 'device' }>): void {
  if (f.array.disposed)
    throw new InvalidFeedError(`model ${model}: input '${name}' is a device array that was already disposed (or donated to a run)`);
  // A lazy array made on another thread's streams cannot be evaluated by the run's worker: evaluate it here.
  if (!f.array.isAvailable()) f.array.eval();
  if (info.type.kind !== 'tensor') return;
  const want = info.type.elemType;
  if (want && f.onnxType !== want)
    throw new InvalidFeedError(
      `model ${model}: input '${name}' expects element type ${dataTypeName(want)}, got ${dataTypeName(f.onnxType)}`,
    );
  const shape = info.type.shape;
  const dims = f.array.shape;
  if (shape && (shape.length !== dims.length || shape.some((d, i) => typeof d === 'number' && d >= 0 && dims[i] !== d)))
    throw new InvalidFeedError(
      `model ${model}: input '${name}' expects shape [${shape.map((d) => d ?? '?').join(', ')}], got [${dims.join(', ')}]`,
    );
}

/**
 * Disposes the donated device feeds (MlxRunOptions.donate) once the graph is built, so that the
 * graph holds their arrays' only references and MLX may reuse their buffers for results. A feed
 * that is itself an output stays.
 */
export function donateFeeds(
  feeds: Record<string, HostTensor | Value>,
  names: readonly string[] | undefined,
  outputs: readonly Value[],
): void {
  if (!names?.length) return;
  const out = new Set(deviceArrays(outputs));
  for (const name of names) {
    const f = feeds[name];
    if (f && 'kind' in f && f.kind === 'device' && !out.has(f.array)) {
      f.array.dispose();
      if (f.reserve && !out.has(f.reserve.buffer)) f.reserve.buffer.dispose();
    }
  }
}

/** The device arrays among values (sequences included), to evaluate together. */
export function deviceArrays(values: readonly Value[]): mx.Array[] {
  const out: mx.Array[] = [];
  const walk = (v: Value) => {
    if (v.kind === 'device') out.push(v.array);
    else if (v.kind === 'sequence') v.items.forEach(walk);
  };
  values.forEach(walk);
  return out;
}
