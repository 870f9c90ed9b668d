// MlxSession: a planned model and its runs, over host tensors. The onnxruntime-common backend
// (backend.ts) wraps it; it is also the lower-level API for element types that
// onnxruntime-common's Tensor cannot hold (bfloat16, float8, int4 as unpacked bytes).
import { readFile } from 'node:fs/promises';
import { basename } from 'node:path';
import * as mx from '@mlx/core';
import { OnnxDataType, dataTypeName, type ExternalDataSpec, type HostTensor, type ModelIR, type ValueInfoIR } from './onnx/index.js';
import type { OpRegistry } from './registry/registry.js';
import { ConstantStore } from './runtime/uploads.js';
import { asHost, type Value } from './runtime/value.js';
import { prepareModel } from './plan/prepare.js';
import { Env, RunState } from './execute/env.js';
import { foldConstants, registerConstants } from './execute/fold.js';
import { GraphProgram } from './execute/run.js';
import { InvalidFeedError, OrtMlxError, UnsupportedOperatorError } from './errors.js';

export interface MlxSessionOptions {
  /** Where MLX runs the model: 'gpu' (Metal or CUDA, where available) or 'cpu'. Default: MLX's default device. */
  device?: 'gpu' | 'cpu';
  /** Trace and compile the planned graph with mlx.compile (cached per input shapes). Default false. */
  compiled?: boolean;
  /** External data for models created from bytes (onnxruntime-common's `externalData`). */
  externalData?: ExternalDataSpec[];
  /** An alternative op registry (tests, experiments). */
  registry?: OpRegistry;
}

export interface TensorMetadata {
  name: string;
  isTensor: boolean;
  /** ONNX element type code, and its name as onnxruntime-common spells it. */
  elemType: number;
  type: string;
  /** Each dimension: a number, a symbolic name, or -1 where unknown. */
  shape: (number | string)[];
}

function metadataOf(v: ValueInfoIR): TensorMetadata {
  const t = v.type;
  if (t.kind !== 'tensor') return { name: v.name, isTensor: false, elemType: 0, type: t.kind, shape: [] };
  return {
    name: v.name, isTensor: true, elemType: t.elemType, type: dataTypeName(t.elemType),
    shape: (t.shape ?? []).map((d) => (d === null || d === undefined ? -1 : d)),
  };
}

export class MlxSession {
  readonly inputNames: string[];
  readonly outputNames: string[];
  readonly inputMetadata: TensorMetadata[];
  readonly outputMetadata: TensorMetadata[];
  private released = false;

  private constructor(readonly model: ModelIR, private readonly program: GraphProgram, private readonly constants: ConstantStore, readonly options: MlxSessionOptions, readonly name: string) {
    const g = model.graph;
    const user = g.inputs.filter((i) => !g.initializers.has(i.name));
    this.inputNames = user.map((i) => i.name);
    this.inputMetadata = user.map(metadataOf);
    this.outputNames = g.outputs.map((o) => o.name);
    this.outputMetadata = g.outputs.map(metadataOf);
  }

  static async create(source: string | Uint8Array | ArrayBuffer, options: MlxSessionOptions = {}): Promise<MlxSession> {
    const bytes = typeof source === 'string' ? new Uint8Array(await readFile(source)) : source instanceof Uint8Array ? source : new Uint8Array(source);
    const name = typeof source === 'string' ? basename(source) : '<bytes>';
    return MlxSession.createSync(bytes, { ...options, modelPath: typeof source === 'string' ? source : undefined }, name);
  }

  /** @internal */
  static createSync(bytes: Uint8Array, options: MlxSessionOptions & { modelPath?: string }, name = '<bytes>'): MlxSession {
    const { model, plan, unsupported } = prepareModel(bytes, { modelPath: options.modelPath, externalData: options.externalData, registry: options.registry, modelName: name });
    if (unsupported.length) throw new UnsupportedOperatorError(name, unsupported);
    const program = new GraphProgram(plan);
    const constants = new ConstantStore();
    registerConstants(program, constants);
    mx.withStream(options.device ?? mx.defaultDevice().type, () => foldConstants(program, constants));
    return new MlxSession(model, program, constants, options, name);
  }

  private validateFeeds(feeds: Record<string, HostTensor | Value>): void {
    const g = this.model.graph;
    const known = new Map(g.inputs.map((i) => [i.name, i]));
    for (const name of Object.keys(feeds)) {
      if (!known.has(name)) throw new InvalidFeedError(`model ${this.name}: unknown input '${name}' (inputs are: ${this.inputNames.join(', ')})`);
    }
    for (const name of this.inputNames) {
      if (!(name in feeds)) throw new InvalidFeedError(`model ${this.name}: missing input '${name}'`);
    }
    for (const [name, f] of Object.entries(feeds)) {
      const info = known.get(name)!;
      if (info.type.kind !== 'tensor' || ('kind' in f && f.kind !== 'host')) continue;
      const t = ('kind' in f ? f.tensor : f) as HostTensor;
      const want = info.type.elemType;
      if (want && t.dtype !== want) {
        throw new InvalidFeedError(`model ${this.name}: input '${name}' expects element type ${dataTypeName(want)}, got ${dataTypeName(t.dtype)}`);
      }
      const shape = info.type.shape;
      if (!shape) continue;
      if (shape.length !== t.dims.length) {
        throw new InvalidFeedError(`model ${this.name}: input '${name}' expects rank ${shape.length} (shape [${shape.map((d) => d ?? '?').join(', ')}]), got rank ${t.dims.length} (shape [${t.dims.join(', ')}])`);
      }
      shape.forEach((d, i) => {
        if (typeof d === 'number' && d >= 0 && t.dims[i] !== d) {
          throw new InvalidFeedError(`model ${this.name}: input '${name}' expects dimension ${i} to be ${d}, got ${t.dims[i]} (shape [${t.dims.join(', ')}])`);
        }
      });
      const n = t.dims.reduce((a, b) => a * b, 1);
      const len = t.dtype === OnnxDataType.COMPLEX64 ? t.data.length / 2 : t.data.length;
      if (len !== n) throw new InvalidFeedError(`model ${this.name}: input '${name}' has ${len} elements but its shape [${t.dims.join(', ')}] needs ${n}`);
    }
  }

  /** Runs synchronously (blocks the thread for the compute). */
  runSync(feeds: Record<string, HostTensor | Value>, fetches: string[] = this.outputNames): Record<string, HostTensor | Value> {
    return mx.withStream(this.stream(), () => mx.scope(() => this.collect(fetches, this.build(feeds, fetches))));
  }

  /**
   * Runs without blocking the event loop while MLX computes: the lazy graph is built (host work),
   * evaluation starts in MLX's stream thread, and the outputs are copied once they are available.
   */
  async run(feeds: Record<string, HostTensor | Value>, fetches: string[] = this.outputNames): Promise<Record<string, HostTensor | Value>> {
    const values = mx.withStream(this.stream(), () =>
      mx.scope(() => {
        const vs = this.build(feeds, fetches);
        mx.asyncEval(vs.flatMap((v) => (v.kind === 'device' ? [v.array] : [])));
        return vs;
      }),
    );
    const owned = values.flatMap((v) => (v.kind === 'device' && !this.isConstant(v) ? [v.array] : []));
    try {
      await waitAvailable(owned);
      return mx.withStream(this.stream(), () => this.collect(fetches, values));
    } finally {
      for (const a of owned) a.dispose();
    }
  }

  private isConstant(v: Value): boolean {
    for (const c of this.program.plan.constants.values()) if (c === v || (c.kind === 'device' && v.kind === 'device' && c.array === v.array)) return true;
    return false;
  }

  private stream(): mx.StreamLike {
    return this.options.device ?? mx.defaultDevice().type;
  }

  private build(feeds: Record<string, HostTensor | Value>, fetches: string[]): Value[] {
    if (this.released) throw new OrtMlxError(`model ${this.name}: session was released`);
    this.validateFeeds(feeds);
    for (const f of fetches) {
      if (!this.outputNames.includes(f) && !this.program.plan.producer.has(f)) throw new InvalidFeedError(`model ${this.name}: unknown output '${f}' (outputs are: ${this.outputNames.join(', ')})`);
    }
    const env = new Env(this.program.plan, new RunState(this.constants, this.name));
    for (const [name, f] of Object.entries(feeds)) env.values.set(name, 'kind' in f ? (f as Value) : { kind: 'host', tensor: f as HostTensor });
    return this.program.execute(env, fetches);
  }

  private collect(fetches: string[], values: Value[]): Record<string, HostTensor | Value> {
    const out: Record<string, HostTensor | Value> = {};
    fetches.forEach((name, i) => {
      const v = values[i];
      out[name] = v.kind === 'host' || v.kind === 'device' ? asHost(v, `output '${name}'`) : v;
    });
    return out;
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    releaseDeviceConstants(this.program);
    this.constants.release();
  }
}

/**
 * Resolves once every array is computed, without blocking the event loop: setImmediate turns for
 * the first milliseconds (most runs finish there, and other callbacks still run between turns),
 * then 1 ms timers so a long computation does not spin a core.
 */
async function waitAvailable(arrays: mx.Array[]): Promise<void> {
  const start = performance.now();
  for (const a of arrays) {
    while (!a.isAvailable()) {
      await new Promise((r) => (performance.now() - start < 5 ? setImmediate(r) : setTimeout(r, 1)));
    }
  }
}

/** Frees the folded device constants of a program and its subprograms. */
function releaseDeviceConstants(program: GraphProgram): void {
  for (const v of program.plan.constants.values()) if (v.kind === 'device') v.array.dispose();
  for (const sub of program.subprograms.values()) releaseDeviceConstants(sub);
}
