// Running a fallback partition (plan/partition.ts) on onnxruntime's CPU backend: its sub-model
// becomes an onnxruntime session, made when the session is created where every input's element
// type is known by then, else on the first run (from the values it is fed). Tensors cross as
// shared host memory: a host value is handed to onnxruntime without a copy, an MLX array is read
// back once, and onnxruntime's results come back as host values that MLX uploads where it needs them.
import type { TypeIR } from '../onnx/index.js';
import type { FallbackPartition } from '../plan/partition.js';
import { fromOrtTensor, ortCanHold, toOrtTensor, type CpuBackend, type OrtSession, type OrtTensor } from '../runtime/onnxruntime.js';
import { dataTypeName, type HostTensor } from '../onnx/index.js';

export class FallbackRunner {
  /** Runs of the partition's sub-model so far. */
  runs = 0;
  private session?: Promise<OrtSession>;
  private released = false;

  constructor(
    readonly partition: FallbackPartition,
    readonly backend: CpuBackend,
    /** The partition in messages: 'onnxruntime partition 0 (Softmax, Gelu)'. */
    readonly where: string,
  ) {}

  /** Makes the onnxruntime session now if every input's type is known before any run; returns its promise, or undefined. */
  prepare(knownType: (name: string) => number | undefined): Promise<unknown> | undefined {
    if (this.session) return this.session;
    const types: TypeIR[] = [];
    for (const name of this.partition.inputs) {
      const declared = this.partition.declaredType(name);
      const elemType = declared?.kind === 'tensor' ? declared.elemType : knownType(name);
      if (!elemType) return undefined;
      types.push(declared ?? { kind: 'tensor', elemType });
    }
    return this.open(types);
  }

  private open(types: TypeIR[]): Promise<OrtSession> {
    const bytes = this.partition.subModel(types);
    const { ort, executionProvider } = this.backend;
    this.session = ort.InferenceSession.create(bytes, { executionProviders: [executionProvider], logSeverityLevel: 3 }).then(
      (s) => {
        this.partition.releaseSources();
        return s;
      },
      (e: unknown) => {
        throw new Error(`${this.backend.name} cannot load the partition's sub-model: ${e instanceof Error ? e.message : String(e)}`, {
          cause: e,
        });
      },
    );
    return this.session;
  }

  /** Runs the partition on its inputs (in `partition.inputs` order); returns its outputs in `partition.outputs` order. */
  async run(inputs: HostTensor[]): Promise<HostTensor[]> {
    if (this.released) throw new Error('the session was released');
    const { ort } = this.backend;
    const names = this.partition.inputs;
    for (let k = 0; k < inputs.length; k++) {
      if (!ortCanHold(inputs[k].dtype))
        throw new Error(
          `input '${names[k]}' has element type ${dataTypeName(inputs[k].dtype)}, which onnxruntime-common's Tensor cannot carry`,
        );
    }
    const session = await (this.session ??
      this.open(names.map((name, k) => this.partition.declaredType(name) ?? { kind: 'tensor', elemType: inputs[k].dtype })));
    const feeds: Record<string, OrtTensor> = {};
    names.forEach((name, k) => (feeds[name] = toOrtTensor(ort, inputs[k], `input '${name}'`)));
    const out = await session.run(feeds, this.partition.outputs);
    this.runs++;
    return this.partition.outputs.map((name) => fromOrtTensor(out[name], `output '${name}'`));
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    void this.session?.then(
      (s) => s.release(),
      () => undefined,
    );
  }
}
