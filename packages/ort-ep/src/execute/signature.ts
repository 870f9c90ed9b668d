// The compiled path: for one feed signature (input dtypes and shapes, and the requested outputs),
// the plan's needed nodes split by what the signature's first run taught (analysis.ts):
// - static host results are kept and reused: shape math is folded per signature, never per run;
// - device nodes form segments, each traced once with mx.compile and replayed on every run;
// - steps (nodes that read dynamic data on the host) run eagerly between segments.
// A segment that cannot be traced (it reads traced data on the host, or passes a sequence across
// its boundary) runs eagerly instead, with the same results.
import type { CompileSetup } from './compile-setup.js';
import * as mx from '@mlx/core';
import { isNondeterministic } from '../plan/graph-plan.js';
import { elemTypeOf, type Value } from '../runtime/value.js';
import type { Analysis } from './analysis.js';
import { Env, RunState, type Replay } from './env.js';
import { outputsOf, type EvalRequest, type GraphProgram } from './run.js';
import type { ConstantStore } from '../runtime/uploads.js';

interface Segment {
  kind: 'segment';
  nodes: number[];
  /** Values the segment reads that earlier groups (or the feeds) make. */
  inputs: string[];
  /** Values it makes that later groups read, or that are requested. */
  outputs: string[];
  /** ONNX element types of inputs and outputs (MLX widens int4 and holds float8 as codes). */
  inputTypes: number[];
  outputTypes: number[];
  /** Traced on first use; undefined while not yet made, null when it cannot be traced. */
  compiled?: mx.CompiledFunction | null;
  /**
   * The guards (OpContext.guard) a trace made, by input shapes (MLX traces again for new shapes):
   * after the outputs, the compiled function returns their flags stacked into one vector (when
   * there are guards), then each guard's detail where it has one.
   */
  guards: Map<string, TracedGuard[]>;
}

interface TracedGuard {
  describe: (d: number[]) => string;
  node: string;
  opType: string;
  hasDetail: boolean;
}

const shapesKey = (arrays: readonly mx.Array[]): string => arrays.map((a) => a.shape.join(',')).join(';');

interface Step {
  kind: 'step';
  node: number;
}

export class SignatureProgram {
  /** The run calling a compiled segment now (a trace marks it: RunState.freshTrace). */
  private calling?: RunState;
  /**
   * Whether a run's evaluation succeeded with every segment traced: the arrays of a signature
   * without steps are the same on every replay, so later replays skip the budget's graph walk.
   */
  private budgetPassed = false;
  /** The last successful evaluation's time (session.ts: a short one runs on the calling thread). */
  private evalMs = Number.POSITIVE_INFINITY;
  private readonly onEvaluated: Replay = { evaluated: (ms) => this.evaluated(ms), lastEvalMs: () => this.evalMs };

  private constructor(
    private readonly program: GraphProgram,
    private readonly fetches: readonly string[],
    /** Host values of static nodes, the same for every run of the signature. */
    private readonly statics: Map<string, Value>,
    private readonly groups: (Segment | Step)[],
    private readonly constants: ConstantStore,
    /** How mx.compile works on the run's device (compile-setup.ts). */
    private readonly setup: CompileSetup,
    /** Feeds fixed by value in this signature (static host values; runner.ts). */
    readonly fixed: ReadonlySet<string>,
  ) {}

  /** How many segments and steps, and how many of the segments are traced (for stats and tests). */
  describe(): { segments: number; steps: number; traced: number; staticValues: number } {
    const segs = this.groups.filter((g): g is Segment => g.kind === 'segment');
    return {
      segments: segs.length,
      steps: this.groups.length - segs.length,
      traced: segs.filter((s) => s.compiled).length,
      staticValues: this.statics.size,
    };
  }

  /**
   * Builds the program from the analysed first run, whose values are still in `env`. `fixed`:
   * feeds whose values are part of the signature (host values, static like shape math).
   */
  static fromAnalysis(
    program: GraphProgram,
    fetches: readonly string[],
    analysis: Analysis,
    env: Env,
    constants: ConstantStore,
    setup: CompileSetup,
    fixed: readonly string[] = [],
  ): SignatureProgram {
    const plan = program.plan;
    const statics = new Map<string, Value>();
    for (const n of fixed) statics.set(n, env.values.get(n)!);
    const groups: (Segment | Step)[] = [];
    let seg: Segment | undefined;
    for (const idx of program.order(fetches)) {
      const outs = plan.nodes[idx].node.outputs.filter((o) => o);
      const cls = isNondeterministic(plan.nodes[idx]) ? 'step' : (analysis.classes.get(idx) ?? 'step');
      if (cls === 'static' && outs.every((o) => env.values.get(o)?.kind === 'host' || env.values.get(o)?.kind === 'none')) {
        for (const o of outs) statics.set(o, env.values.get(o)!);
        continue;
      }
      if (cls === 'step') {
        seg = undefined;
        groups.push({ kind: 'step', node: idx });
        continue;
      }
      if (!seg)
        groups.push((seg = { kind: 'segment', nodes: [], inputs: [], outputs: [], inputTypes: [], outputTypes: [], guards: new Map() }));
      seg.nodes.push(idx);
    }
    // Liveness: what each group reads, and which group makes each value.
    const madeBy = new Map<string, number>();
    const reads: Set<string>[] = groups.map((g, gi) => {
      const r = new Set<string>();
      for (const idx of g.kind === 'segment' ? g.nodes : [g.node]) {
        const pn = plan.nodes[idx];
        for (const i of pn.node.inputs) if (i) r.add(i);
        for (const i of pn.outerReads) r.add(i);
        for (const o of pn.node.outputs) if (o) madeBy.set(o, gi);
      }
      return r;
    });
    const wanted = new Set(fetches);
    groups.forEach((g, gi) => {
      if (g.kind !== 'segment') return;
      for (const name of reads[gi]) {
        const maker = madeBy.get(name);
        if (maker === gi || statics.has(name) || (plan.constants.has(name) && !plan.overridable.has(name))) continue;
        g.inputs.push(name);
      }
      for (const [name, maker] of madeBy) {
        if (maker !== gi) continue;
        if (wanted.has(name) || reads.some((r, k) => k > gi && r.has(name))) g.outputs.push(name);
      }
      const typeOf = (n: string) => elemTypeOf(env.get(n) ?? { kind: 'none' });
      g.inputTypes = g.inputs.map(typeOf);
      g.outputTypes = g.outputs.map(typeOf);
      const tensors = (names: string[]) =>
        names.every((n) => {
          const k = env.get(n)?.kind;
          return k === 'device' || k === 'host';
        });
      const deviceOut = g.outputs.every((n) => env.get(n)?.kind === 'device');
      if (!tensors(g.inputs) || !deviceOut) g.compiled = null;
    });
    return new SignatureProgram(program, fetches, statics, groups, constants, setup, new Set(fixed));
  }

  /** Marks the budget as passed once every segment is traced and there are no steps. */
  private evaluated(ms?: number): void {
    this.budgetPassed ||= this.groups.every((g) => g.kind === 'segment' && g.compiled);
    if (ms !== undefined) this.evalMs = ms;
  }

  /** Runs the signature's program in `env` (feeds set); yields when a step needs evaluated data. */
  *run(env: Env): Generator<EvalRequest, Value[], void> {
    env.statics = this.statics;
    env.run.budgetKnown = this.budgetPassed;
    env.run.replaying = this.onEvaluated;
    for (const g of this.groups) {
      if (g.kind === 'step') {
        yield* this.program.runNodes([g.node], env);
        continue;
      }
      if (g.compiled === undefined) g.compiled = this.setup.traced ? this.trace(g) : null;
      if (g.compiled) {
        let outs: mx.Array[] | undefined;
        let args: mx.Array[] = [];
        try {
          args = g.inputs.map((n) => env.run.toArray(env.get(n)!, n));
          this.calling = env.run;
          outs = g.compiled(...args) as mx.Array[];
          this.calling = undefined;
        } catch {
          // The trace failed (a host read of traced data, an op MLX cannot compile): from now
          // on this segment runs eagerly, which gives the same results.
          g.compiled.dispose();
          g.compiled = null;
        }
        if (outs) {
          const n = g.outputs.length;
          for (let k = 0; k < n; k++) env.values.set(g.outputs[k], { kind: 'device', array: outs[k], onnxType: g.outputTypes[k] });
          // One trace (the usual case) needs no key: a call with new shapes traces, adding one.
          const traced = g.guards.size === 1 ? g.guards.values().next().value! : (g.guards.get(shapesKey(args)) ?? []);
          if (traced.length) {
            let k = n + 1;
            const guards = traced.map((info) => ({
              detail: info.hasDetail ? outs![k++] : undefined,
              describe: info.describe,
              node: info.node,
              opType: info.opType,
            }));
            env.run.guardSets.push({ flags: outs[n], guards });
          }
          continue;
        }
      }
      yield* this.program.runNodes(g.nodes, env);
    }
    return outputsOf(env, this.fetches);
  }

  private trace(g: Segment): mx.CompiledFunction {
    const body = (...inputs: mx.Array[]): mx.Array[] => {
      const run = new RunState(this.constants, this.program.plan.modelName);
      run.tracing = true;
      const env = new Env(this.program.plan, run);
      env.statics = this.statics;
      inputs.forEach((a, k) => env.values.set(g.inputs[k], { kind: 'device', array: a, onnxType: g.inputTypes[k] }));
      for (const idx of g.nodes) this.program.runNode(idx, env);
      const outs = g.outputs.map((n) => {
        const v = env.get(n);
        if (v?.kind !== 'device') throw new Error(`internal error: segment output '${n}' is not an MLX array`);
        return v.array;
      });
      // The guards become outputs too, so that every replay checks its own data: their flags
      // stacked (the driver then adds no op per run), then their details.
      if (this.calling) this.calling.freshTrace = true;
      g.guards.set(
        shapesKey(inputs),
        run.guards.map((x) => ({ describe: x.describe, node: x.node, opType: x.opType, hasDetail: !!x.detail })),
      );
      if (run.guards.length) outs.push(mx.stack(run.guards.map((x) => mx.reshape(mx.astype(x.bad, 'bool'), []))));
      for (const x of run.guards) if (x.detail) outs.push(x.detail);
      return outs;
    };
    return this.setup.tracer === 'capture' ? mx.captureGraph(body) : mx.compile(body);
  }

  /** Frees the traces. */
  dispose(): void {
    for (const g of this.groups) if (g.kind === 'segment' && g.compiled) g.compiled.dispose();
  }
}
