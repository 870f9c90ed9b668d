// One model's runs: the eager path (every run walks the plan) and the compiled path (a
// SignatureProgram per feed signature, in an LRU cache), both written as generators the drivers
// run synchronously or without blocking.
import { dataTypeName, type HostTensor } from '../onnx/index.js';
import { mxDtypeOf } from '../runtime/convert.js';
import type { ConstantStore } from '../runtime/uploads.js';
import type { Value } from '../runtime/value.js';
import { Analysis } from './analysis.js';
import { compileSetup } from './compile-setup.js';
import { Env, RunState, type MemoryLimits } from './env.js';
import { outputsOf, type EvalRequest, type GraphProgram } from './run.js';
import { SignatureProgram } from './signature.js';

export interface CompileStats {
  /** Runs whose signature had a program already. */
  hits: number;
  /** Runs that analysed a new signature (they run eagerly, and the next run of it is traced). */
  misses: number;
  /** Programs dropped by the LRU. */
  evictions: number;
  /** Programs held now. */
  size: number;
}

export interface RunnerOptions {
  compiled: boolean;
  device: 'cpu' | 'gpu';
  limits: MemoryLimits;
  /** Most signatures kept (LRU). */
  maxSignatures: number;
}

export class ModelRunner {
  private readonly programs = new Map<string, SignatureProgram>();
  readonly stats: CompileStats = { hits: 0, misses: 0, evictions: 0, size: 0 };

  constructor(
    readonly program: GraphProgram,
    readonly constants: ConstantStore,
    readonly options: RunnerOptions,
  ) {}

  /** A new run's state. */
  newRun(): RunState {
    return new RunState(this.constants, this.program.plan.modelName, this.options.limits);
  }

  /** Builds the outputs of one run in `run` (lazily; the caller evaluates them). */
  *run(run: RunState, feeds: Record<string, HostTensor | Value>, fetches: readonly string[]): Generator<EvalRequest, Value[], void> {
    const env = new Env(this.program.plan, run);
    if (!this.options.compiled) {
      for (const [name, f] of Object.entries(feeds))
        env.values.set(name, 'kind' in f ? (f as Value) : { kind: 'host', tensor: f as HostTensor });
      yield* this.program.runNodes(this.program.order(fetches), env);
      return outputsOf(env, fetches);
    }
    const key = signatureKey(feeds, fetches);
    const known = this.programs.get(key);
    if (known) {
      this.stats.hits++;
      // Most recently used last.
      this.programs.delete(key);
      this.programs.set(key, known);
      this.setFeeds(env, run, feeds);
      return yield* known.run(env);
    }
    this.stats.misses++;
    const analysis = new Analysis();
    run.analysis = analysis;
    this.setFeeds(env, run, feeds);
    for (const v of env.values.values()) analysis.markFeed(v);
    yield* this.program.runNodes(this.program.order(fetches), env);
    run.analysis = undefined;
    const sig = SignatureProgram.fromAnalysis(
      this.program,
      fetches,
      analysis,
      env,
      this.constants,
      compileSetup(this.options.device).traced,
    );
    this.programs.set(key, sig);
    while (this.programs.size > this.options.maxSignatures) {
      const [oldest, p] = this.programs.entries().next().value!;
      p.dispose();
      this.programs.delete(oldest);
      this.stats.evictions++;
    }
    this.stats.size = this.programs.size;
    return outputsOf(env, fetches);
  }

  /** Compiled-path feeds: tensors MLX can hold go to the device; others (strings) stay on the host. */
  private setFeeds(env: Env, run: RunState, feeds: Record<string, HostTensor | Value>): void {
    for (const [name, f] of Object.entries(feeds)) {
      let v: Value = 'kind' in f ? (f as Value) : { kind: 'host', tensor: f as HostTensor };
      if (v.kind === 'host' && mxDtypeOf(v.tensor.dtype)) v = { kind: 'device', array: run.toArray(v, name), onnxType: v.tensor.dtype };
      env.values.set(name, v);
    }
  }

  /** The signatures' program shapes, for tests and diagnostics. */
  describe(): ReturnType<SignatureProgram['describe']>[] {
    return [...this.programs.values()].map((p) => p.describe());
  }

  release(): void {
    for (const p of this.programs.values()) p.dispose();
    this.programs.clear();
    this.stats.size = 0;
  }
}

function signatureKey(feeds: Record<string, HostTensor | Value>, fetches: readonly string[]): string {
  let key = fetches.join('\0') + '\u0001';
  for (const name of Object.keys(feeds).sort()) {
    const f = feeds[name];
    const v: Value = 'kind' in f ? (f as Value) : { kind: 'host', tensor: f as HostTensor };
    if (v.kind === 'host') key += `${name}:${dataTypeName(v.tensor.dtype)}[${v.tensor.dims.join(',')}];`;
    else if (v.kind === 'device') key += `${name}:${dataTypeName(v.onnxType)}[${v.array.shape.join(',')}];`;
    else key += `${name}:${v.kind};`;
  }
  return key;
}
