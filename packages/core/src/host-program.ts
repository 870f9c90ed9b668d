// A compiled or captured function run over host data in one native call (mlxc_capture_run_host):
// the inputs copied in, the function applied, its results evaluated and read out. For a run whose
// work is small, the calls around the work (an upload per input, a replay, an evaluation, a
// download per result, each with its handles to make and free) cost more than the work itself.
import type { Dtype } from './dtype.js';
import { dtypeCode, typedArrayCtor, type TypedArray } from './dtype.js';
import { Array } from './array.js';
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
  /** The native program (mlxc_host_program_new) for runs on #programStream, made at the first run. */
  #program?: unknown;
  #programStream?: Stream;

  constructor(f: CompiledFunction, inputs: readonly HostSlot[], results: readonly HostSlot[], stream?: StreamLike) {
    closureOfCompiled(f);
    this.#f = f;
    const copy = (s: HostSlot): HostSlot => ({ dtype: s.dtype, shape: [...s.shape], ...(s.array ? { array: true } : {}) });
    this.#inputs = inputs.map(copy);
    this.#results = results.map(copy);
    this.#in = pack(this.#inputs, 'input');
    this.#out = pack(this.#results, 'result');
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
    const single =
      hostOut.length === 1
        ? new (typedArrayCtor(this.#results[hostOut[0]].dtype))(
            this.#out.bytes[hostOut[0]] / typedArrayCtor(this.#results[hostOut[0]].dtype).BYTES_PER_ELEMENT,
          )
        : undefined;
    const outData = single ?? (this.#outStaging ??= new Uint8Array(Math.max(this.#out.total, 1)));
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
    const inBytes = hostIn.length === 1 ? inData.byteLength : this.#in.total;
    const outBytes = single ? single.byteLength : this.#out.total;
    const arrayIn = this.#in.arrays;
    const arrayOut = this.#out.arrays;
    let returned: BigUint64Array | undefined;
    if (arrayIn.length || arrayOut.length) {
      const addresses = new BigUint64Array(Math.max(arrayIn.length, 1));
      const taken = new Uint8Array(Math.max(arrayIn.length, 1));
      arrayIn.forEach((i, k) => {
        addresses[k] = (inputs[i] as Array).address;
        taken[k] = consume?.[i] ? 1 : 0;
      });
      returned = new BigUint64Array(Math.max(arrayOut.length, 1));
      try {
        if (stream !== this.#programStream)
          throw new Error('HostProgram.run: a program with Array inputs or results runs on the stream of its first run only');
        check(
          fn.mlxc_host_program_run_arrays(
            this.#program,
            inData,
            inBytes,
            addresses,
            arrayIn.length,
            taken,
            outData,
            outBytes,
            returned,
            arrayOut.length,
          ),
          'mlxc_host_program_run_arrays',
        );
      } finally {
        arrayIn.forEach((i, k) => {
          if (taken[k]) (inputs[i] as Array).dispose();
        });
      }
    } else if (stream === this.#programStream) {
      // The usual case: only the buffers cross (no handles, descriptors or signature per run).
      check(fn.mlxc_host_program_run(this.#program, inData, inBytes, outData, outBytes), 'mlxc_host_program_run');
    } else {
      check(
        fn.mlxc_capture_run_host(
          closure,
          inData,
          inBytes,
          this.#in.desc,
          this.#in.desc.length,
          nIn,
          outData,
          outBytes,
          this.#out.desc,
          this.#out.desc.length,
          this.#results.length,
          stream.handle,
        ),
        'mlxc_capture_run_host',
      );
    }
    const buf = outData.buffer as ArrayBuffer;
    let k = 0;
    return this.#results.map((s, i) => {
      if (s.array) return Array.fromAddress(returned![k++], dtypeCode(s.dtype), [...s.shape]);
      if (single) return single;
      const ctor = typedArrayCtor(s.dtype);
      const off = this.#out.offsets[i];
      return new ctor(buf.slice(off, off + this.#out.bytes[i]));
    });
  }
}
