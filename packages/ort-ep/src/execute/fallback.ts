// Running a fallback partition (plan/partition.ts) on onnxruntime's CPU backend: its sub-model
// becomes an onnxruntime session, made when the session is created where every input's element
// type is known by then, else on the first run (from the values it is fed). Tensors cross as
// shared host memory: a host value is handed to onnxruntime without a copy, an MLX array is read
// back once, and onnxruntime's results come back as host values that MLX uploads where it needs them.
// Sequences and optionals cross in tensor form (plan/boundary.ts); a sequence input's length is
// part of the sub-model, so there is one onnxruntime session per length seen.
import { dataTypeName, type HostTensor, type TypeIR } from '../onnx/index.js';
import { itemInput, optionalInput, outputParts, sequenceItems, type InputForm, type OutputForm } from '../plan/boundary.js';
import type { FallbackPartition } from '../plan/graph-plan.js';
import { fromOrtTensor, toOrtTensor, type CpuBackend, type OrtSession, type OrtTensor } from '../runtime/onnxruntime.js';
import { ortCanHold } from '../runtime/ort-tensor.js';
import { asHost, type Value } from '../runtime/value.js';

export class FallbackRunner {
  /** Runs of the partition's sub-model so far. */
  runs = 0;
  /** onnxruntime sessions by the forms of the inputs ('' when every input is a tensor). */
  private sessions = new Map<string, Promise<OrtSession>>();
  private outputForms?: OutputForm[];
  private released = false;

  constructor(
    readonly partition: FallbackPartition,
    readonly backend: CpuBackend,
    /** The partition in messages: 'onnxruntime partition 0 (Softmax, Gelu)'. */
    readonly where: string,
    /** Called when a run is terminated while this partition runs (stops its process, if it does not end soon). */
    readonly cancel: () => void = () => undefined,
  ) {}

  /** Makes the onnxruntime session now if every input's type is known before any run; returns its promise, or undefined. */
  prepare(knownType: (name: string) => number | undefined): Promise<unknown> | undefined {
    const ready = this.sessions.get('');
    if (ready) return ready;
    const types: TypeIR[] = [];
    for (const name of this.partition.inputs) {
      if (this.partition.nonTensorKind(name)) return undefined;
      const declared = this.partition.declaredType(name);
      const elemType = declared?.kind === 'tensor' ? declared.elemType : knownType(name);
      if (!elemType) return undefined;
      types.push(declared ?? { kind: 'tensor', elemType });
    }
    return this.open(
      '',
      types,
      types.map(() => ({ kind: 'tensor' })),
    );
  }

  private open(key: string, types: TypeIR[], forms: InputForm[]): Promise<OrtSession> {
    this.outputForms ??= this.partition.outputForms();
    const bytes = this.partition.subModel(types, forms);
    const { ort, executionProvider } = this.backend;
    const session = ort.InferenceSession.create(bytes, { executionProviders: [executionProvider], logSeverityLevel: 3 }).then(
      (s) => {
        // Another form of the sub-model (another sequence length) needs the initializers again.
        if (!key) this.partition.releaseSources();
        return s;
      },
      (e: unknown) => {
        throw new Error(`${this.backend.name} cannot load the partition's sub-model: ${e instanceof Error ? e.message : String(e)}`, {
          cause: e,
        });
      },
    );
    this.sessions.set(key, session);
    return session;
  }

  /** Runs the partition on its inputs (in `partition.inputs` order); returns its outputs in `partition.outputs` order. */
  async run(values: Value[]): Promise<Value[]> {
    if (this.released) throw new Error('the session was released');
    const { ort } = this.backend;
    const names = this.partition.inputs;
    const feeds: Record<string, OrtTensor> = {};
    const feed = (name: string, t: HostTensor, what: string) => {
      if (!ortCanHold(t.dtype))
        throw new Error(`${what} has element type ${dataTypeName(t.dtype)}, which onnxruntime-common's Tensor cannot carry`);
      feeds[name] = toOrtTensor(ort, t, what);
    };
    const types: TypeIR[] = [];
    const forms: InputForm[] = values.map((v, k) => {
      const name = names[k];
      const declared = this.partition.declaredType(name);
      if (v.kind === 'map') throw new Error(`input '${name}' is a map, which cannot cross to onnxruntime through its JavaScript API`);
      if (declared?.kind === 'optional') {
        types.push(declared);
        if (v.kind === 'none' && declared.elem?.kind !== 'sequence') {
          if (!declared.elem) throw new Error(`input '${name}' is an empty optional whose element type is not declared`);
          return { kind: 'optional', present: false, type: declared };
        }
        if (declared.elem?.kind === 'sequence') {
          if (v.kind !== 'sequence' && v.kind !== 'none')
            throw new Error(`input '${name}' is declared an optional sequence but is fed a ${v.kind}`);
          const inner = declared.elem.elem;
          const elemType = v.kind === 'sequence' ? v.elemType : inner?.kind === 'tensor' ? inner.elemType : 0;
          if (!elemType) throw new Error(`input '${name}' is an empty optional sequence whose element type is not declared`);
          const items = v.kind === 'sequence' ? v.items : [];
          items.forEach((item, j) =>
            feed(itemInput(optionalInput(name), j), asHost(item, `element ${j} of input '${name}'`), `element ${j} of input '${name}'`),
          );
          return { kind: 'optional-sequence', present: v.kind === 'sequence', count: items.length, elemType, type: declared };
        }
        if (v.kind === 'sequence') throw new Error(`input '${name}' is declared an optional tensor but is fed a sequence`);
        feed(optionalInput(name), asHost(v, `input '${name}'`), `input '${name}'`);
        return { kind: 'optional', present: true, type: declared };
      }
      if (v.kind === 'none')
        throw new Error(
          `input '${name}' is an empty optional of undeclared type, which onnxruntime cannot be handed: declare its type in a value info`,
        );
      if (v.kind === 'sequence') {
        types.push({ kind: 'sequence' });
        v.items.forEach((item, j) =>
          feed(itemInput(name, j), asHost(item, `element ${j} of input '${name}'`), `element ${j} of input '${name}'`),
        );
        return { kind: 'sequence', count: v.items.length, elemType: v.elemType };
      }
      const t = asHost(v, `input '${name}'`);
      types.push(declared?.kind === 'tensor' ? declared : { kind: 'tensor', elemType: t.dtype });
      feed(name, t, `input '${name}'`);
      return { kind: 'tensor' };
    });
    const key = forms.every((f) => f.kind === 'tensor')
      ? ''
      : JSON.stringify(
          forms.map((f) =>
            f.kind === 'sequence'
              ? [f.count, f.elemType]
              : f.kind === 'optional'
                ? f.present
                : f.kind === 'optional-sequence'
                  ? [f.present, f.count, f.elemType]
                  : 0,
          ),
        );
    const session = await (this.sessions.get(key) ?? this.open(key, types, forms));
    const outForms = this.outputForms!;
    const fetches = this.partition.outputs.flatMap((name, k) => outputParts(name, outForms[k]));
    const out = await session.run(feeds, fetches);
    this.runs++;
    return this.partition.outputs.map((name, k): Value => {
      const form = outForms[k];
      const parts = outputParts(name, form).map((p) => fromOrtTensor(out[p], `output '${name}'`));
      if (form.kind === 'sequence')
        return {
          kind: 'sequence',
          elemType: form.elemType,
          items: sequenceItems(name, parts[0], parts[1], parts[2]).map((tensor) => ({ kind: 'host', tensor })),
        };
      if (form.kind === 'optional') return (parts[0].data as Uint8Array)[0] ? { kind: 'host', tensor: parts[1] } : { kind: 'none' };
      if (form.kind === 'optional-sequence')
        return (parts[0].data as Uint8Array)[0]
          ? {
              kind: 'sequence',
              elemType: form.elemType,
              items: sequenceItems(name, parts[1], parts[2], parts[3]).map((tensor) => ({ kind: 'host', tensor })),
            }
          : { kind: 'none' };
      return { kind: 'host', tensor: parts[0] };
    });
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    for (const s of this.sessions.values())
      void s.then(
        (x) => x.release(),
        () => undefined,
      );
  }
}
