// A compiled or captured function run over host data in one native call (mlxc_capture_run_host):
// the inputs copied in, the function applied, its results evaluated and read out. For a run whose
// work is small, the calls around the work (an upload per input, a replay, an evaluation, a
// download per result, each with its handles to make and free) cost more than the work itself.
import type { Dtype } from './dtype.js';
import { dtypeCode, typedArrayCtor, type TypedArray } from './dtype.js';
import { Array } from './array.js';
import { whenReported } from './eval.js';
import { hostBuffer, populatedBytes } from './host.js';
import { flushDisposed } from './lifetime.js';
import { check, fn } from './native.js';
import { resolveStream, type Stream, type StreamLike } from './stream.js';
import { closureOfCompiled, type CompiledFunction } from './transforms.js';

/**
 * How many HostProgram runs so far (process-wide) executed their function's trace directly: a
 * captureGraph() function on a CPU stream runs its traced primitives in order on the calling
 * thread, each intermediate freed after its last use, instead of building the graph again for
 * MLX's evaluation. 0 where that is off (MLXC_STATIC_EXEC=0); runs it does not take (a compile()
 * function, a GPU stream, MLX's compiled primitives, an asynchronous evaluation of the stream in
 * flight, the debug aids, an address-space limit) replay the trace and evaluate it as before.
 */
export function hostProgramStaticRuns(): number {
  const n = [0];
  check(fn.mlxc_capture_static_runs(n as never), 'mlxc_capture_static_runs');
  return Number(n[0]);
}

/** The dtype and shape of one input or result of a HostProgram. */
export interface HostSlot {
  dtype: Dtype;
  shape: readonly number[];
  /**
   * Given (an input) or returned (a result) as an Array rather than host data: an input that is
   * already an Array (a KV cache kept by the caller) is read where it is, a result that stays an
   * Array is not read out.
   */
  array?: boolean;
}

/** Results of a run that take this many bytes together get a populated buffer of the run's own. */
const LARGE_RESULT_BYTES = 1 << 20;

/** A run's buffer for large results: a pooled host block, or populated ordinary memory (not pooled, or past the pool's limit). */
function resultBuffer(bytes: number, pooled: boolean): ArrayBuffer {
  return (pooled ? hostBuffer(bytes) : undefined) ?? (populatedBytes(bytes).buffer as ArrayBuffer);
}

/** Offsets are kept 16-byte aligned in the packed buffers. */
const align = (n: number) => Math.ceil(n / 16) * 16;

interface Packed {
  desc: BigInt64Array;
  offsets: number[];
  bytes: number[];
  total: number;
  /** The slots given or returned as Arrays, and the others (host data), in order. */
  arrays: number[];
  host: number[];
}

function pack(slots: readonly HostSlot[], what: string): Packed {
  const desc: bigint[] = [];
  const offsets: number[] = [];
  const bytes: number[] = [];
  const arrays: number[] = [];
  const host: number[] = [];
  let at = 0;
  slots.forEach((s, i) => {
    const ctor = typedArrayCtor(s.dtype);
    if (!ctor || s.dtype === 'complex64')
      throw new TypeError(`HostProgram: ${what} ${i} has dtype ${String(s.dtype)}, which it does not carry`);
    let n = 1;
    for (const d of s.shape) {
      if (!Number.isInteger(d) || d < 0 || d > 0x7fffffff) throw new RangeError(`HostProgram: ${what} ${i} has a bad dimension ${d}`);
      n *= d;
    }
    const nb = n * ctor.BYTES_PER_ELEMENT;
    if (!Number.isSafeInteger(nb)) throw new RangeError(`HostProgram: ${what} ${i} is too large`);
    // An Array slot has offset -1 and no bytes in the packed buffer.
    desc.push(BigInt(dtypeCode(s.dtype)), BigInt(s.shape.length), s.array ? -1n : BigInt(at), ...s.shape.map(BigInt));
    offsets.push(s.array ? -1 : at);
    bytes.push(s.array ? 0 : nb);
    (s.array ? arrays : host).push(i);
    if (!s.array) at = align(at + nb);
  });
  return { desc: BigInt64Array.from(desc), offsets, bytes, total: at, arrays, host };
}

/** Frees a HostProgram's native program (mlxc_host_program_new) once the HostProgram is collected. */
const programs = new FinalizationRegistry<unknown>((p) => fn.mlxc_host_program_free(p));

/**
 * `f` (from compile() or captureGraph()) run over host data for one signature: each run() copies
 * the inputs in, applies `f`, evaluates its results and reads them into new typed arrays, all in
 * one native call. The results must have the dtypes and shapes given (an error otherwise, before
 * anything is computed). Evaluation happens on the calling thread, with no memory budget: use it
 * where the work is known to be small or already checked.
 *
 * Results of 1 MiB and more together land in a buffer of the run's own whose pages exist already:
 * with `pooledResults` (the default) a block of hostBuffer()'s pool, back in the pool once the
 * results are collected (as onnxruntime-node's results are memory of its own allocator), else
 * new populated memory. The largest result is a view of that buffer, the others copies.
 */
export class HostProgram {
  readonly #f: CompiledFunction;
  readonly #inputs: readonly HostSlot[];
  readonly #results: readonly HostSlot[];
  readonly #in: Packed;
  readonly #out: Packed;
  readonly #stream: StreamLike | undefined;
  #staging?: Uint8Array;
  #outStaging?: Uint8Array;
  /** The native call's small buffers for runs of host inputs and results on the calling thread (#call). */
  #scratch?: CallScratch;
  /** The host result with the most bytes (-1: none). */
  #largest: number;
  readonly #pooled: boolean;
  /** The large results' buffer of a tryRunAsync() that did not run, for the run() after it. */
  #spare?: ArrayBufferView;
  /** The native program (mlxc_host_program_new) for runs on #programStream, made at the first run. */
  #program?: unknown;
  #lastAsyncMs?: number;
  #programStream?: Stream;

  constructor(
    f: CompiledFunction,
    inputs: readonly HostSlot[],
    results: readonly HostSlot[],
    stream?: StreamLike,
    options: { pooledResults?: boolean } = {},
  ) {
    closureOfCompiled(f);
    this.#pooled = options.pooledResults ?? true;
    this.#f = f;
    const copy = (s: HostSlot): HostSlot => ({ dtype: s.dtype, shape: [...s.shape], ...(s.array ? { array: true } : {}) });
    this.#inputs = inputs.map(copy);
    this.#results = results.map(copy);
    this.#in = pack(this.#inputs, 'input');
    this.#out = pack(this.#results, 'result');
    this.#largest = this.#out.host.reduce((best, i) => (best < 0 || this.#out.bytes[i] > this.#out.bytes[best] ? i : best), -1);
    this.#stream = stream;
  }

  get inputs(): readonly HostSlot[] {
    return this.#inputs;
  }

  get results(): readonly HostSlot[] {
    return this.#results;
  }

  /**
   * One run: `inputs` in (a typed array of each host input's dtype and size; an Array of its
   * dtype and shape for each input marked `array`), new typed arrays out (Arrays for the results
   * marked `array`, the caller's to dispose). `consume[i]` lets the run take Array input i over:
   * it then holds the array's only reference, so a kernel may write its output into that input's
   * buffer (a KV cache updated in place); a consumed input is disposed by the run, whether the run
   * succeeds or not.
   */
  run(inputs: readonly (ArrayBufferView | Array)[], consume?: readonly boolean[]): (TypedArray | Array)[] {
    const c = this.#call(inputs, consume, false);
    const arrayIn = this.#in.arrays;
    if (arrayIn.length || this.#out.arrays.length) {
      try {
        if (c.stream !== this.#programStream)
          throw new Error('HostProgram.run: a program with Array inputs or results runs on the stream of its first run only');
        check(
          fn.mlxc_host_program_run_arrays(
            this.#program,
            c.inData,
            c.inBytes,
            c.addresses,
            arrayIn.length,
            c.taken,
            c.outData,
            c.outBytes,
            c.returned,
            this.#out.arrays.length,
          ),
          'mlxc_host_program_run_arrays',
        );
      } finally {
        this.#disposeTaken(inputs, c.taken);
      }
    } else if (c.stream === this.#programStream) {
      // The usual case: only the buffers cross (no handles, descriptors or signature per run).
      check(fn.mlxc_host_program_run(this.#program, c.inData, c.inBytes, c.outData, c.outBytes), 'mlxc_host_program_run');
    } else {
      check(
        fn.mlxc_capture_run_host(
          c.closure,
          c.inData,
          c.inBytes,
          this.#in.desc,
          this.#in.desc.length,
          this.#inputs.length,
          c.outData,
          c.outBytes,
          this.#out.desc,
          this.#out.desc.length,
          this.#results.length,
          c.stream.handle,
        ),
        'mlxc_capture_run_host',
      );
    }
    return this.#collect(c);
  }

  /**
   * run() on the stream's evaluation thread (the one evalInBackground uses), resolving with the
   * results: the inputs are read (or taken) before it returns, so the caller may reuse them at
   * once. Where that thread cannot run it (tryRunAsync), it runs on this one.
   */
  runAsync(inputs: readonly (ArrayBufferView | Array)[], consume?: readonly boolean[]): Promise<(TypedArray | Array)[]> {
    return this.tryRunAsync(inputs, consume) ?? Promise.resolve(this.run(inputs, consume));
  }

  /**
   * runAsync(), or undefined, having done nothing, where the stream's evaluation thread cannot run
   * it: a function that is not a captureGraph() one or whose trace the static executor does not
   * take (a GPU stream, MLX's compiled primitives, MLXC_STATIC_EXEC=0), a stream only this thread
   * may evaluate. The trace (a new signature's is made by calling the function) is found on this
   * thread; the evaluation thread only executes it.
   */
  tryRunAsync(inputs: readonly (ArrayBufferView | Array)[], consume?: readonly boolean[]): Promise<(TypedArray | Array)[]> | undefined {
    const c = this.#call(inputs, consume, true);
    // Where it returns undefined, the run() that follows takes the large results' buffer.
    if (c.stream !== this.#programStream) {
      this.#spare = c.outData;
      return undefined;
    }
    const queued = [0];
    let done: Promise<void> | undefined;
    try {
      done = whenReported((id) => {
        check(
          fn.mlxc_host_program_run_async(
            this.#program,
            c.inData,
            c.inBytes,
            c.addresses,
            this.#in.arrays.length,
            c.taken,
            c.outData,
            c.outBytes,
            c.returned,
            this.#out.arrays.length,
            id,
            queued,
            c.elapsed,
          ),
          'mlxc_host_program_run_async',
        );
        return queued[0] !== 0;
      }, c.stream);
    } catch (e) {
      this.#disposeTaken(inputs, c.taken);
      throw e;
    }
    if (!done) {
      this.#spare = c.outData;
      return undefined;
    }
    this.#disposeTaken(inputs, c.taken);
    // The buffers the worker writes stay referenced (by `c`) until it reports.
    return done.then(() => {
      this.#lastAsyncMs = c.elapsed[0];
      return this.#collect(c);
    });
  }

  /**
   * The time the last asynchronous run took on the evaluation thread, in milliseconds (without the
   * hand-offs to that thread and back); undefined before one finished.
   */
  get lastAsyncMs(): number | undefined {
    return this.#lastAsyncMs;
  }

  /** Checks the inputs, packs the host ones, makes the native program at the first call. */
  #call(inputs: readonly (ArrayBufferView | Array)[], consume: readonly boolean[] | undefined, fresh: boolean) {
    const nIn = this.#inputs.length;
    if (inputs.length !== nIn) throw new RangeError(`HostProgram.run: ${inputs.length} inputs given, ${nIn} expected`);
    for (let i = 0; i < nIn; i++) {
      const x = inputs[i];
      if (this.#inputs[i].array) {
        if (!(x instanceof Array) || x.disposed)
          throw new TypeError(
            `HostProgram.run: input ${i} must be an Array of ${this.#inputs[i].dtype}${x instanceof Array ? ', not a disposed one' : ''}`,
          );
        continue;
      }
      if (!ArrayBuffer.isView(x) || x.byteLength !== this.#in.bytes[i])
        throw new RangeError(
          `HostProgram.run: input ${i} must be ${this.#in.bytes[i]} bytes of ${this.#inputs[i].dtype}, got ${ArrayBuffer.isView(x) ? x.byteLength : typeof x}`,
        );
    }
    const hostIn = this.#in.host;
    let inData: ArrayBufferView;
    if (hostIn.length === 1) inData = inputs[hostIn[0]] as ArrayBufferView;
    else {
      this.#staging ??= new Uint8Array(Math.max(this.#in.total, 1));
      for (const i of hostIn) {
        const x = inputs[i] as ArrayBufferView;
        this.#staging.set(new Uint8Array(x.buffer, x.byteOffset, x.byteLength), this.#in.offsets[i]);
      }
      inData = this.#staging;
    }
    const hostOut = this.#out.host;
    const total = this.#out.total;
    // Large results land in a buffer of the run's own whose pages exist already: a pooled host
    // block, which goes back to the pool when the result is collected (onnxruntime-node's results
    // are likewise memory of its own allocator), so a loop of runs writes the same pages. A new
    // ArrayBuffer each run cost a language model's logits tens of milliseconds in page faults
    // and garbage collections. The largest result is handed out as a view of it (collect).
    const large = total >= LARGE_RESULT_BYTES;
    // A tryRunAsync() that did not run leaves its unwritten buffer for this call.
    const spare = large ? this.#spare : undefined;
    this.#spare = undefined;
    const single =
      hostOut.length === 1
        ? (() => {
            const ctor = typedArrayCtor(this.#results[hostOut[0]].dtype);
            const bytes = this.#out.bytes[hostOut[0]];
            if (spare) return spare as TypedArray;
            return large
              ? new ctor(resultBuffer(bytes, this.#pooled), 0, bytes / ctor.BYTES_PER_ELEMENT)
              : new ctor(bytes / ctor.BYTES_PER_ELEMENT);
          })()
        : undefined;
    // An asynchronous run writes into buffers of its own: a later run may start before it is read.
    const outData =
      single ??
      (large
        ? ((spare as Uint8Array | undefined) ?? new Uint8Array(resultBuffer(total, this.#pooled), 0, total))
        : fresh
          ? new Uint8Array(Math.max(total, 1))
          : (this.#outStaging ??= new Uint8Array(Math.max(total, 1))));
    flushDisposed();
    const stream = resolveStream(this.#stream);
    // Throws when f was disposed: the native program refers to f's closure without owning it.
    const closure = closureOfCompiled(this.#f).handle;
    if (this.#program === undefined) {
      const res = [null];
      check(
        fn.mlxc_host_program_new(
          res,
          closure,
          this.#in.desc,
          this.#in.desc.length,
          nIn,
          this.#out.desc,
          this.#out.desc.length,
          this.#results.length,
          stream.handle,
        ),
        'mlxc_host_program_new',
      );
      this.#program = res[0];
      this.#programStream = stream;
      programs.register(this, res[0]);
    }
    const arrayIn = this.#in.arrays;
    // A run of host inputs and results only (the usual one) on this thread leaves these unwritten
    // and unread: one set serves every such run. Others, and asynchronous runs (a later run may
    // start before an earlier one's are read), get their own.
    const shared = !fresh && arrayIn.length === 0 && this.#out.arrays.length === 0;
    const scratch = shared ? (this.#scratch ??= callScratch(0, 0)) : callScratch(arrayIn.length, this.#out.arrays.length);
    const { addresses, taken } = scratch;
    arrayIn.forEach((i, k) => {
      addresses[k] = (inputs[i] as Array).address;
      taken[k] = consume?.[i] ? 1 : 0;
    });
    return {
      inData,
      inBytes: hostIn.length === 1 ? inData.byteLength : this.#in.total,
      outData,
      outBytes: single ? single.byteLength : this.#out.total,
      single,
      stream,
      closure,
      addresses,
      taken,
      returned: scratch.returned,
      elapsed: scratch.elapsed,
      program: this,
    };
  }

  #disposeTaken(inputs: readonly (ArrayBufferView | Array)[], taken: Uint8Array): void {
    this.#in.arrays.forEach((i, k) => {
      if (taken[k]) (inputs[i] as Array).dispose();
    });
  }

  /** The results of a finished run, from its buffers. */
  #collect(c: { outData: ArrayBufferView; single?: TypedArray; returned: BigUint64Array }): (TypedArray | Array)[] {
    const buf = c.outData.buffer as ArrayBuffer;
    // In a buffer of the run's own (large results), the largest result is a view of it rather
    // than a copy; each other one is copied out, so no two results share memory with each other.
    const viewed = this.#out.total >= LARGE_RESULT_BYTES ? this.#largest : -1;
    let k = 0;
    return this.#results.map((s, i) => {
      // Evaluated by the run (on this thread, or on the evaluation thread that reported).
      if (s.array) return Array.fromAddress(c.returned[k++], dtypeCode(s.dtype), [...s.shape]).knownAvailable();
      if (c.single) return c.single;
      const ctor = typedArrayCtor(s.dtype);
      const off = this.#out.offsets[i];
      if (i === viewed) return new ctor(buf, off, this.#out.bytes[i] / ctor.BYTES_PER_ELEMENT);
      return new ctor(buf.slice(off, off + this.#out.bytes[i]));
    });
  }
}

interface CallScratch {
  addresses: BigUint64Array;
  taken: Uint8Array;
  returned: BigUint64Array;
  elapsed: Float64Array;
}

/** A native call's small buffers: Array inputs' addresses and whether each is taken, Array results' addresses, the time it took. */
function callScratch(arraysIn: number, arraysOut: number): CallScratch {
  return {
    addresses: new BigUint64Array(Math.max(arraysIn, 1)),
    taken: new Uint8Array(Math.max(arraysIn, 1)),
    returned: new BigUint64Array(Math.max(arraysOut, 1)),
    elapsed: new Float64Array(1),
  };
}
