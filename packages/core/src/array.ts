// Array: owns exactly one mlx_array handle. Construction from numbers, nested arrays and TypedArrays;
// data out through TypedArrays (evaluating first); float16/bfloat16 travel as uint16 bits.
import type { MlxHandle } from '@mlx/sys';
import {
  bfloat16BitsToNumber,
  dtypeCode,
  dtypeFromCode,
  dtypeOfTypedArray,
  float16BitsToNumber,
  float32ToBfloat16Bits,
  itemsize,
  numberToFloat16Bits,
  typedArrayCtor,
  type Dtype,
  type TypedArray,
} from './dtype.js';
import { freeLater, trackArray, untrackArray } from './lifetime.js';
import { describeValue, toInt32Array } from './ints.js';
import { check, fn, koffi } from './native.js';
import { defaultStream } from './stream.js';

/** What ops accept where MLX takes an array: an Array, or a JS scalar (see call.ts for its dtype). */
export type ArrayLike = Array | number | boolean | bigint;
export type NestedData = number | boolean | bigint | readonly NestedData[];

export interface ArrayOptions {
  dtype?: Dtype;
  shape?: readonly number[];
}

/** How Array.fromTypedArray and Array.fromBytes place their copy. */
export interface NewDataOptions {
  /** Kept for a long time (a model's weights): placed in the arena of resident arrays (memory.resident()). */
  resident?: boolean;
}

/** mlxc_array_meta's buffer: dtype, ndim and up to 30 dims (one buffer: JS is single-threaded). */
const META = new Int32Array(32);

/** Every Array's shape or size read, when shapeReadHook is set (the compiled path's shapeless check). */
let shapeReadHook: ((a: Array) => void) | undefined;

/**
 * @internal Calls `hook` with every Array whose shape, size or byte count is read while `body`
 * runs (ndim and dtype are not counted). Hooks do not nest: an inner call replaces the outer hook
 * for its duration.
 */
export function watchShapeReads<T>(hook: (a: Array) => void, body: () => T): T {
  const prev = shapeReadHook;
  shapeReadHook = hook;
  try {
    return body();
  } finally {
    shapeReadHook = prev;
  }
}

export class Array {
  #handle: MlxHandle;
  #ndim?: number;
  #shape?: number[];
  #dtype?: Dtype;
  #address?: bigint;
  /** Known to be computed (isAvailable() said so, or its maker evaluated it): MLX never takes that back. */
  #available = false;

  private constructor(handle: MlxHandle) {
    this.#handle = handle;
    trackArray(this, handle);
  }

  /** @internal Takes ownership of a handle returned by the C API. */
  static fromHandle(h: MlxHandle): Array {
    if (!h.ctx) throw new Error('internal error: empty array handle');
    return new Array(h);
  }

  /**
   * @internal Takes ownership of the mlx_array whose ctx address is `address` (from a native call
   * that writes addresses), with its dtype code and shape already known (no native call).
   */
  static fromAddress(address: bigint, dtype: number, shape: number[] | undefined): Array {
    if (!address) throw new Error('internal error: empty array handle');
    const a = new Array({ ctx: address } as unknown as MlxHandle);
    a.#address = address;
    if (shape) {
      a.#dtype = dtypeFromCode(dtype);
      a.#ndim = shape.length;
      a.#shape = shape;
    }
    return a;
  }

  /** @internal Sets the dtype and shape the creator knows (an array made from data), sparing the read. */
  knownMeta(d: Dtype, shape: number[]): this {
    this.#dtype = d;
    this.#ndim = shape.length;
    this.#shape = shape;
    return this;
  }

  /** @internal The address of the native array (the handle's ctx), for calls that take lists of them. */
  get address(): bigint {
    if (this.#address === undefined) {
      const h = this.handle;
      this.#address = typeof h.ctx === 'bigint' ? h.ctx : BigInt(koffi.address(h.ctx) as bigint | number);
    }
    return this.#address;
  }

  /**
   * An array from a TypedArray and a shape; the data is copied. `resident`: the array is kept for
   * a long time (a model's weights): on Linux's CPU build it is copied into the arena of resident
   * arrays, on huge pages where the system gives them (see `memory.resident()`).
   */
  static fromTypedArray(data: ArrayBufferView, shape: readonly number[], dtype?: Dtype, opts?: NewDataOptions): Array {
    const natural = dtypeOfTypedArray(data);
    const d = dtype ?? natural;
    const dims = toInt32Array(shape, 'Array.fromTypedArray: shape', 'dim');
    const n = shape.reduce((a, b) => a * b, 1);
    const ctor = typedArrayCtor(d);
    const perElem = d === 'complex64' ? 2 : 1;
    if (data.constructor === ctor) {
      const len = (data as TypedArray).length;
      if (len !== n * perElem) throw new RangeError(`data has ${len} elements but shape [${shape.join(', ')}] needs ${n * perElem}`);
      return newData(data, dims, d, opts?.resident);
    }
    // Different element type: build with the natural dtype, then cast.
    const tmp = Array.fromTypedArray(data, shape, natural);
    try {
      return tmp.astype(d);
    } finally {
      tmp.dispose();
    }
  }

  /**
   * An array from the little-endian bytes of its elements (any alignment: the bytes are copied).
   * For data read from files, where the element type's width and not a TypedArray is what is known.
   */
  static fromBytes(bytes: Uint8Array, shape: readonly number[], dtype: Dtype, opts?: NewDataOptions): Array {
    const dims = toInt32Array(shape, 'Array.fromBytes: shape', 'dim');
    const n = shape.reduce((a, b) => a * b, 1);
    const want = n * itemsize(dtype);
    if (bytes.length !== want)
      throw new RangeError(`Array.fromBytes: ${bytes.length} bytes for shape [${shape.join(', ')}] ${dtype}, which needs ${want}`);
    return newData(bytes, dims, dtype, opts?.resident);
  }

  get handle(): MlxHandle {
    if (!this.#handle.ctx) throw new Error('array was disposed');
    return this.#handle;
  }
  get disposed(): boolean {
    return !this.#handle.ctx;
  }

  // MLX never changes an array's shape or dtype, so each is read from MLX once, on first use, and
  // kept in the wrapper (no FFI call at creation). `shape` returns a copy that callers may change.
  // The three come from one call (mlxc_array_meta) on the first read of any of them.
  #readMeta(): void {
    const h = this.handle;
    check(fn.mlxc_array_meta(META as never, h, META.length), 'mlxc_array_meta');
    const nd = META[1];
    this.#dtype = dtypeFromCode(META[0]);
    this.#ndim = nd;
    this.#shape =
      nd <= META.length - 2
        ? globalThis.Array.from(META.subarray(2, 2 + nd))
        : globalThis.Array.from(koffi.decode(fn.mlx_array_shape(h), 'int', nd) as number[]);
  }
  get ndim(): number {
    if (!this.#handle.ctx) throw new Error('array was disposed');
    if (this.#ndim === undefined) this.#readMeta();
    return this.#ndim!;
  }
  get shape(): number[] {
    if (!this.#handle.ctx) throw new Error('array was disposed');
    if (!this.#shape) this.#readMeta();
    shapeReadHook?.(this);
    return this.#shape!.slice();
  }
  /** The number of elements (from the cached shape). */
  get size(): number {
    if (!this.#handle.ctx) throw new Error('array was disposed');
    if (!this.#shape) this.#readMeta();
    shapeReadHook?.(this);
    let n = 1;
    for (const d of this.#shape!) n *= d;
    return n;
  }
  get nbytes(): number {
    return this.size * itemsize(this.dtype);
  }
  get itemsize(): number {
    return itemsize(this.dtype);
  }
  get dtype(): Dtype {
    if (!this.#handle.ctx) throw new Error('array was disposed');
    if (!this.#dtype) this.#readMeta();
    return this.#dtype!;
  }

  /** Whether the array's value is computed (after evaluate or asyncEval); never blocks. */
  isAvailable(): boolean {
    if (this.#available) {
      if (!this.#handle.ctx) throw new Error('array was disposed');
      return true;
    }
    const out = [false];
    check(fn._mlx_array_is_available(out as never, this.handle), '_mlx_array_is_available');
    this.#available = out[0];
    return out[0];
  }

  /** @internal Records that the array is computed (its maker evaluated it), sparing isAvailable()'s native call. */
  knownAvailable(): this {
    this.#available = true;
    return this;
  }

  /** Evaluates the array's graph (a no-op once evaluated). */
  eval(): this {
    check(fn.mlx_array_eval(this.handle), 'mlx_array_eval');
    return this;
  }

  /**
   * On MLX's CUDA build, moves an evaluated array's memory to the host or the GPU in one transfer
   * (instead of page by page when it is first touched there); returns whether it moved (false on
   * builds without CUDA, where it does nothing).
   */
  prefetch(to: 'host' | 'device'): boolean {
    const moved = [false];
    check(fn.mlxc_array_prefetch(moved as never, this.handle, to === 'host'), 'mlxc_array_prefetch');
    return moved[0];
  }

  /**
   * The CUDA device whose memory holds the array's data, or -1 (host or unified memory, and always
   * on builds without CUDA). Arrays made from JS data for a GPU stream, and results of GPU kernels,
   * live in device memory; reading them copies them out over the bus in one transfer.
   */
  get deviceIndex(): number {
    const out = [0];
    check(fn.mlxc_array_device_index(out as never, this.handle), 'mlxc_array_device_index');
    return out[0];
  }

  /** Copies the data out, evaluating first. float16/bfloat16 come as Uint16Array bits, bool as 0/1 bytes. */
  toTypedArray(): TypedArray {
    const d = this.dtype;
    const ctor = typedArrayCtor(d);
    const n = this.size;
    const out = new ctor(n * (d === 'complex64' ? 2 : 1));
    // One call: evaluates, makes a view (transpose, broadcast, strided slice) contiguous, and
    // copies into the result (on MLX's CUDA build, device memory comes out by the copy engine).
    check(fn.mlxc_array_read_any(out, out.byteLength, this.handle, defaultStream().handle), 'mlxc_array_read_any');
    return out;
  }

  /**
   * Copies the data into `dst`, evaluating first: a typed array of the class toTypedArray gives
   * and of its length. Reading into memory that is reused (or a block of hostBuffer, which on MLX's
   * CUDA build the copy engine writes directly) skips the page faults of a fresh allocation.
   */
  readInto(dst: TypedArray): TypedArray {
    const d = this.dtype;
    const ctor = typedArrayCtor(d);
    const n = this.size * (d === 'complex64' ? 2 : 1);
    if (!(dst instanceof ctor)) throw new TypeError(`readInto: a ${d} array reads into a ${ctor.name}, got ${describeValue(dst)}`);
    if (dst.length !== n) throw new RangeError(`readInto: the array has ${n} elements, the destination ${dst.length}`);
    check(fn.mlxc_array_read_any(dst, dst.byteLength, this.handle, defaultStream().handle), 'mlxc_array_read_any');
    return dst;
  }

  /** The single element as a JS value (number, bigint for 64-bit integers, boolean for bool). */
  item(): number | bigint | boolean {
    if (this.size !== 1) throw new RangeError(`item() needs an array of one element, this one has shape [${this.shape.join(', ')}]`);
    const d = this.dtype;
    // JS has no complex number; silently returning the real part would lose data.
    if (d === 'complex64') throw new TypeError('item() of a complex64 array: read [re, im] with toTypedArray() or toList()');
    const v = this.toTypedArray()[0];
    if (d === 'bool') return v !== 0;
    if (d === 'float16') return float16BitsToNumber(v as number);
    if (d === 'bfloat16') return bfloat16BitsToNumber(v as number);
    return v;
  }

  /** The data as nested JS arrays (numbers; bigint for 64-bit integers; booleans for bool; [re, im] for complex64). */
  toList(): NestedData {
    const d = this.dtype;
    const flat = this.toTypedArray();
    const conv = (i: number): NestedData => {
      if (d === 'complex64') return [flat[2 * i] as number, flat[2 * i + 1] as number];
      const v = flat[i];
      if (d === 'bool') return v !== 0;
      if (d === 'float16') return float16BitsToNumber(v as number);
      if (d === 'bfloat16') return bfloat16BitsToNumber(v as number);
      return v;
    };
    const shape = this.shape;
    let k = 0;
    const build = (dim: number): NestedData => {
      if (dim === shape.length) return conv(k++);
      const out: NestedData[] = [];
      for (let i = 0; i < shape[dim]; i++) out.push(build(dim + 1));
      return out;
    };
    return build(0);
  }

  astype(d: Dtype): Array {
    const res = { ctx: null };
    check(fn.mlx_astype(res, this.handle, dtypeCode(d), defaultStream().handle), 'mlx_astype');
    return Array.fromHandle(res);
  }

  toString(): string {
    if (this.disposed) return 'array(<disposed>)';
    const s = { ctx: null };
    check(fn.mlx_array_tostring(s, this.handle), 'mlx_array_tostring');
    const text = fn.mlx_string_data(s);
    fn.mlx_string_free(s);
    return text;
  }

  dispose(): void {
    if (!this.#handle.ctx) return;
    untrackArray(this);
    freeLater(this.#handle);
  }
  [Symbol.dispose](): void {
    this.dispose();
  }
}

/**
 * An array of `data` (copied) for the current default stream's device: on MLX's CUDA build and a
 * GPU stream, large data goes straight to device memory (mlxc_array_new_data_on).
 */
function newData(data: ArrayBufferView, dims: Int32Array, d: Dtype, resident = false): Array {
  const res = { ctx: null };
  if (resident)
    check(fn.mlxc_array_new_resident(res, data, dims, dims.length, dtypeCode(d), defaultStream().handle), 'mlxc_array_new_resident');
  else check(fn.mlxc_array_new_data_on(res, data, dims, dims.length, dtypeCode(d), defaultStream().handle), 'mlxc_array_new_data_on');
  return Array.fromHandle(res).knownMeta(d, globalThis.Array.from(dims));
}

/** Fills a TypedArray of dtype `d` from JS values. */
export function encodeValues(values: readonly (number | boolean | bigint)[], d: Dtype): TypedArray {
  const ctor = typedArrayCtor(d);
  const out = new ctor(d === 'complex64' ? values.length * 2 : values.length);
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    switch (d) {
      case 'int64':
      case 'uint64':
        (out as BigInt64Array)[i] = typeof v === 'bigint' ? v : BigInt(Math.trunc(Number(v)));
        break;
      case 'float16':
        out[i] = numberToFloat16Bits(Number(v));
        break;
      case 'bfloat16':
        out[i] = float32ToBfloat16Bits(Number(v));
        break;
      case 'bool':
        out[i] = v ? 1 : 0;
        break;
      case 'complex64':
        out[2 * i] = Number(v);
        break;
      default:
        out[i] = Number(v);
    }
  }
  return out;
}

function inferShape(data: NestedData): number[] {
  const shape: number[] = [];
  let cur: NestedData = data;
  while (globalThis.Array.isArray(cur)) {
    shape.push(cur.length);
    if (cur.length === 0) break;
    cur = (cur as readonly NestedData[])[0];
  }
  return shape;
}

/** Where in `data` a value sits, for messages: `data[1][0]`. */
const at = (path: readonly number[]) => `data${path.map((i) => `[${i}]`).join('')}`;

/** A JS value MLX can hold: a number, boolean or bigint; anything else would become NaN or 0. */
function checkElement(v: unknown, where: string): asserts v is number | boolean | bigint {
  if (typeof v !== 'number' && typeof v !== 'boolean' && typeof v !== 'bigint') {
    throw new TypeError(`${where} is ${describeValue(v)}: an array holds numbers, booleans or bigints`);
  }
}

function flatten(data: NestedData, shape: number[], path: number[], out: (number | boolean | bigint)[]): void {
  const dim = path.length;
  if (dim === shape.length) {
    if (globalThis.Array.isArray(data)) throw new TypeError('ragged nested array: deeper nesting than the first element');
    checkElement(data, `array: ${at(path)}`);
    out.push(data);
    return;
  }
  if (!globalThis.Array.isArray(data) || data.length !== shape[dim]) {
    throw new TypeError(`ragged nested array: expected ${shape[dim]} elements at depth ${dim}`);
  }
  for (let i = 0; i < data.length; i++) {
    path.push(i);
    flatten(data[i], shape, path, out);
    path.pop();
  }
}

/**
 * Creates an array. `data` is a number, boolean, bigint, a nested JS array of them, or a TypedArray
 * (then `shape` defaults to its length). Without a dtype: booleans give bool, bigints int64, numbers
 * float32, and a TypedArray its own element type.
 */
export function array(data: NestedData | ArrayBufferView, options: Dtype | ArrayOptions = {}): Array {
  const opts: ArrayOptions = typeof options === 'string' ? { dtype: options } : options;
  if (ArrayBuffer.isView(data)) {
    const len = (data as TypedArray).length;
    if (opts.shape) toInt32Array(opts.shape, 'array: shape', 'dim');
    return Array.fromTypedArray(data, opts.shape ?? [len], opts.dtype);
  }
  const shape = inferShape(data);
  const flat: (number | boolean | bigint)[] = [];
  flatten(data, shape, [], flat);
  const d =
    opts.dtype ?? (flat.length && typeof flat[0] === 'boolean' ? 'bool' : flat.length && typeof flat[0] === 'bigint' ? 'int64' : 'float32');
  // -1 in `shape` infers that dimension, as in reshape.
  const target = opts.shape && toInt32Array(opts.shape, 'array: shape', 'dimOrInfer');
  const arr = Array.fromTypedArray(encodeValues(flat, d), shape, d);
  if (target && opts.shape!.join(',') !== shape.join(',')) {
    const res = { ctx: null };
    try {
      check(fn.mlx_reshape(res, arr.handle, target, target.length, defaultStream().handle), 'mlx_reshape');
    } finally {
      arr.dispose();
    }
    return Array.fromHandle(res);
  }
  return arr;
}

/** A zero-dimensional array of the given dtype. */
export function scalar(value: number | boolean | bigint, dtype: Dtype): Array {
  checkElement(value, 'scalar: value');
  return Array.fromTypedArray(encodeValues([value], dtype), [], dtype);
}
