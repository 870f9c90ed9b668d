// A compiled or captured function run over host data in one native call (mlxc_capture_run_host):
// the inputs copied in, the function applied, its results evaluated and read out. For a run whose
// work is small, the calls around the work (an upload per input, a replay, an evaluation, a
// download per result, each with its handles to make and free) cost more than the work itself.
import type { Dtype } from './dtype.js';
import { dtypeCode, typedArrayCtor, type TypedArray } from './dtype.js';
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
}

/** Offsets are kept 16-byte aligned in the packed buffers. */
const align = (n: number) => Math.ceil(n / 16) * 16;

interface Packed {
  desc: BigInt64Array;
  offsets: number[];
  bytes: number[];
  total: number;
}

function pack(slots: readonly HostSlot[], what: string): Packed {
  const desc: bigint[] = [];
  const offsets: number[] = [];
  const bytes: number[] = [];
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
    desc.push(BigInt(dtypeCode(s.dtype)), BigInt(s.shape.length), BigInt(at), ...s.shape.map(BigInt));
    offsets.push(at);
    bytes.push(nb);
    at = align(at + nb);
  });
  return { desc: BigInt64Array.from(desc), offsets, bytes, total: at };
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
    this.#inputs = inputs.map((s) => ({ dtype: s.dtype, shape: [...s.shape] }));
    this.#results = results.map((s) => ({ dtype: s.dtype, shape: [...s.shape] }));
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

  /** One run: `inputs` (typed arrays of each input's dtype and size) in, new typed arrays out. */
  run(inputs: readonly ArrayBufferView[]): TypedArray[] {
    const nIn = this.#inputs.length;
    if (inputs.length !== nIn) throw new RangeError(`HostProgram.run: ${inputs.length} inputs given, ${nIn} expected`);
    for (let i = 0; i < nIn; i++) {
      const x = inputs[i];
      if (!ArrayBuffer.isView(x) || x.byteLength !== this.#in.bytes[i])
        throw new RangeError(
          `HostProgram.run: input ${i} must be ${this.#in.bytes[i]} bytes of ${this.#inputs[i].dtype}, got ${ArrayBuffer.isView(x) ? x.byteLength : typeof x}`,
        );
    }
    let inData: ArrayBufferView;
    if (nIn === 1) inData = inputs[0];
    else {
      this.#staging ??= new Uint8Array(Math.max(this.#in.total, 1));
      for (let i = 0; i < nIn; i++) {
        const x = inputs[i];
        this.#staging.set(new Uint8Array(x.buffer, x.byteOffset, x.byteLength), this.#in.offsets[i]);
      }
      inData = this.#staging;
    }
    const nOut = this.#results.length;
    const single =
      nOut === 1
        ? new (typedArrayCtor(this.#results[0].dtype))(this.#out.bytes[0] / typedArrayCtor(this.#results[0].dtype).BYTES_PER_ELEMENT)
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
          nOut,
          stream.handle,
        ),
        'mlxc_host_program_new',
      );
      this.#program = res[0];
      this.#programStream = stream;
      programs.register(this, res[0]);
    }
    const inBytes = nIn === 1 ? inData.byteLength : this.#in.total;
    const outBytes = single ? single.byteLength : this.#out.total;
    if (stream === this.#programStream) {
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
          nOut,
          stream.handle,
        ),
        'mlxc_capture_run_host',
      );
    }
    if (single) return [single];
    const buf = outData.buffer as ArrayBuffer;
    return this.#results.map((s, i) => {
      const ctor = typedArrayCtor(s.dtype);
      const off = this.#out.offsets[i];
      return new ctor(buf.slice(off, off + this.#out.bytes[i]));
    });
  }
}
