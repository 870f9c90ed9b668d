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

type DeviceValue = Extract<Value, { kind: 'device' }>;
import type { Analysis } from './analysis.js';
import { Env, RunState, type Replay } from './env.js';
import { outputsOf, type EvalRequest, type GraphProgram } from './run.js';
import type { ConstantStore } from '../runtime/uploads.js';
import { countTransfers, mxDtypeOf } from '../runtime/convert.js';
import { OnnxDataType, type HostTensor } from '../onnx/index.js';
import { NodeExecutionError } from '../errors.js';

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

/**
 * ONNX element types whose host tensors hold MLX's bytes as they are (no widening, no codes): the
 * one-call run (HostRun) copies them in and out without conversion.
 */
const PLAIN_TYPES = new Set<number>([
  OnnxDataType.FLOAT,
  OnnxDataType.UINT8,
  OnnxDataType.INT8,
  OnnxDataType.UINT16,
  OnnxDataType.INT16,
  OnnxDataType.INT32,
  OnnxDataType.INT64,
  OnnxDataType.BOOL,
  OnnxDataType.FLOAT16,
  OnnxDataType.DOUBLE,
  OnnxDataType.UINT32,
  OnnxDataType.UINT64,
  OnnxDataType.BFLOAT16,
]);

/**
 * How a one-call run treats device values: which fetches stay on the device (MlxRunOptions
 * keepOnDevice) and which device feeds it may consume (MlxRunOptions.donate).
 */
export interface OneCallMode {
  keep: (name: string) => boolean;
  donate: ReadonlySet<string>;
}

/** A run of host feeds and host results only. */
export const HOST_ONLY: OneCallMode = { keep: () => false, donate: new Set() };

/**
 * A signature whose program is one traced segment over the feeds: each later run is one native
 * call (mx.HostProgram: the feeds copied in, the replay, its evaluation, the results read out),
 * with no graph built in JS, no handles made and freed, no per-output download. Feeds that are
 * device arrays (a KV cache kept on the device) are passed as they are, and consumed where the run
 * may (a donated cache is then updated in place); fetches kept on the device come back as arrays.
 * Made for the form of the run it learnt from: which feeds were device arrays and which fetches
 * stayed on the device; a run of another form takes the usual path.
 */
interface HostRun {
  program: mx.HostProgram;
  /** The feeds, in the segment's input order, and which of them are device arrays. */
  feeds: string[];
  deviceFeeds: boolean[];
  /** Per fetch: the index of its array among the program's results, its ONNX type and dims, and whether it stays on the device. */
  fetched: { index: number; onnxType: number; dims: number[]; kept: boolean }[];
  /** The segment's guards (their flags are the result after the segment's outputs, then details). */
  guards: TracedGuard[];
  /** Bytes of the host feeds and of the host results, and how many of each, for the transfer counters. */
  inBytes: number;
  outBytes: number;
  hostFeeds: number;
  keptCount: number;
}

/** A one-call run goes back to the calling thread after this many in a row on the evaluation thread (runsInline). */
export const INLINE_PROBE_EVERY = 8;

/**
 * Whether a one-call run evaluates on the calling thread rather than the stream's evaluation
 * thread: its signature's last evaluation took under `shortEvalMs`; or it ran on the evaluation
 * thread INLINE_PROBE_EVERY times in a row, measured there under twice `shortEvalMs` (never for
 * shortEvalMs 0). The evaluation thread's own time runs above the calling thread's for the same
 * work (on 2 vCPUs, the 7M decoder's 0.7 ms step took 0.95-1.1 ms there: its data cached by the
 * other core, the JS thread still running as it starts), so one slow step sent a decode loop there
 * for good, each step then paying the hops there and back (0.2-0.5 ms). The probe measures the
 * step where it ran before; it blocks the event loop at most once in INLINE_PROBE_EVERY runs, for
 * less than twice `shortEvalMs` as last measured. A signature never yet measured on the calling
 * thread probes after one run there (`probeAfter` 1): its first one-call run follows its trace,
 * whose evaluation (weights packed, kernels built) says nothing of a replay's, and eight steps of
 * each new decode loop went through the hops for it (a 7M decoder's 20-token loop: half its steps).
 */
export function runsInline(evalMs: number, asyncInARow: number, shortEvalMs: number, probeAfter = INLINE_PROBE_EVERY): boolean {
  return evalMs < shortEvalMs || (asyncInARow >= probeAfter && evalMs < 2 * shortEvalMs);
}

export class SignatureProgram {
  /** The run calling a compiled segment now (a trace marks it: RunState.freshTrace). */
  private calling?: RunState;
  /**
   * Whether a run's evaluation succeeded with every segment traced: the arrays of a signature
   * without steps are the same on every replay, so later replays skip the budget's graph walk.
   */
  private budgetPassed = false;
  /**
   * The lesser of the last two successful evaluations' times on the calling thread (session.ts: a
   * short one runs there again); the last one's on the evaluation thread. One step slowed by
   * another process (on 2 vCPUs a 0.5 ms decode step now and then took over 1 ms) sent the next
   * INLINE_PROBE_EVERY runs to the evaluation thread, each ~0.7 ms slower for the hops: one in ten
   * steps of a loop there under load. Two in a row still do.
   */
  private evalMs = Number.POSITIVE_INFINITY;
  /** The last evaluation's own time on the calling thread (evalMs); infinite until one ran there. */
  private lastInlineMs = Number.POSITIVE_INFINITY;
  /** One-call runs evaluated on the stream's evaluation thread since the last one on the calling thread (runsInline). */
  private asyncInARow = 0;
  private readonly onEvaluated: Replay = { evaluated: (ms) => this.evaluated(ms), lastEvalMs: () => this.evalMs };
  /**
   * The one-call form of this signature's runs: undefined until a replay of a single-segment
   * program succeeded, null where it does not apply (steps, several segments, feeds or results
   * MLX holds in another form, a segment that read host values).
   */
  private host?: HostRun | null;
  /** The last replay's arguments and results (dtypes and shapes) and form, for making `host`. */
  private replayed?: { args: mx.HostSlot[]; outs: mx.HostSlot[]; deviceFeeds: boolean[]; kept: boolean[] };

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
    /** The session's stream (the one-call runs read their results through it). */
    private readonly stream?: mx.Stream,
    /** Whether one-call runs put large results in pooled host blocks (outputMemory; mx.HostProgram). */
    private readonly pooledResults = true,
  ) {}

  /** How many segments and steps, and how many of the segments are traced (for stats and tests). */
  describe(): { segments: number; steps: number; traced: number; staticValues: number; oneCall: boolean } {
    const segs = this.groups.filter((g): g is Segment => g.kind === 'segment');
    return {
      oneCall: !!this.host,
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
    stream?: mx.Stream,
    pooledResults = true,
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
    return new SignatureProgram(program, fetches, statics, groups, constants, setup, new Set(fixed), stream, pooledResults);
  }

  /** Marks the budget as passed once every segment is traced and there are no steps. */
  private evaluated(ms?: number): void {
    this.budgetPassed ||= this.groups.every((g) => g.kind === 'segment' && g.compiled);
    if (ms !== undefined) this.evalMs = ms;
    if (this.host === undefined && this.budgetPassed && this.replayed) this.host = this.makeHostRun(this.replayed);
    this.replayed = undefined;
  }

  /** The one-call form (HostRun) of a program that is one traced segment over plain feeds, or null. */
  private makeHostRun(r: NonNullable<SignatureProgram['replayed']>): HostRun | null {
    const g = this.groups[0];
    if (this.groups.length !== 1 || g.kind !== 'segment' || !g.compiled) return null;
    // Feeds only: a graph input with an initializer (a default the run may not have fed) is not one.
    const plan = this.program.plan;
    const inputs = new Set(plan.graph.inputs.map((i) => i.name));
    const fed = (n: string, k: number) =>
      inputs.has(n) && !plan.constants.has(n) && PLAIN_TYPES.has(g.inputTypes[k]) && r.args[k].dtype === mxDtypeOf(g.inputTypes[k]);
    if (!g.inputs.every(fed)) return null;
    const fetched: HostRun['fetched'] = [];
    const outs = r.outs.map((o) => ({ ...o }));
    for (const [i, f] of this.fetches.entries()) {
      const index = g.outputs.indexOf(f);
      if (index < 0 || !PLAIN_TYPES.has(g.outputTypes[index]) || r.outs[index].dtype !== mxDtypeOf(g.outputTypes[index])) return null;
      // A fetch twice, once kept and once not, has no one form.
      if (fetched.some((x) => x.index === index && x.kept !== r.kept[i])) return null;
      if (r.kept[i]) outs[index].array = true;
      fetched.push({ index, onnxType: g.outputTypes[index], dims: [...r.outs[index].shape], kept: r.kept[i] });
    }
    const guards = g.guards.size === 1 ? g.guards.values().next().value! : g.guards.size === 0 ? [] : undefined;
    if (!guards) return null;
    const size = (a: mx.HostSlot) => (a.array ? 0 : mx.itemsize(a.dtype) * a.shape.reduce((x, y) => x * y, 1));
    const args = r.args.map((a, k) => (r.deviceFeeds[k] ? { ...a, array: true } : a));
    try {
      const program = new mx.HostProgram(g.compiled, args, outs, this.stream, { pooledResults: this.pooledResults });
      return {
        program,
        feeds: [...g.inputs],
        deviceFeeds: [...r.deviceFeeds],
        fetched,
        guards,
        inBytes: args.reduce((t, a) => t + size(a), 0),
        outBytes: fetched.reduce((t, f) => t + size(outs[f.index]), 0),
        hostFeeds: r.deviceFeeds.filter((d) => !d).length,
        keptCount: fetched.filter((f) => f.kept).length,
      };
    } catch {
      return null;
    }
  }

  /**
   * Whether this run takes one native call (runHost): the signature has a one-call form, and the
   * run has its form (the same feeds on the device, the same fetches kept there); then the last
   * evaluation's time.
   */
  hostRunMs(feeds: Record<string, HostTensor | Value>, mode: OneCallMode): number | undefined {
    const h = this.host;
    if (!h) return undefined;
    for (let k = 0; k < h.feeds.length; k++) {
      const f = feeds[h.feeds[k]];
      const device = 'kind' in f;
      // A device feed of another dtype than the trace's (an ONNX type MLX holds in another form), or with a reserve (kv-append.ts), takes the usual path.
      if (device !== h.deviceFeeds[k]) return undefined;
      if (
        device &&
        ((f as Value).kind !== 'device' || (f as DeviceValue).reserve || (f as DeviceValue).array.dtype !== h.program.inputs[k].dtype)
      )
        return undefined;
    }
    for (let i = 0; i < this.fetches.length; i++) if (mode.keep(this.fetches[i]) !== h.fetched[i].kept) return undefined;
    return this.evalMs;
  }

  /**
   * One run in one native call (only where hostRunMs() says so): the feeds (host tensors of this
   * signature, checked by the caller) in, the fetches out as host tensors.
   */
  runHost(feeds: Record<string, HostTensor | Value>, modelName: string, mode: OneCallMode): Record<string, HostTensor | Value> {
    const h = this.host!;
    const t0 = performance.now();
    const outs = h.program.run(...this.hostArgs(h, feeds, mode));
    const ms = performance.now() - t0;
    this.evalMs = this.asyncInARow ? ms : Math.min(ms, this.lastInlineMs);
    this.lastInlineMs = ms;
    this.asyncInARow = 0;
    return this.hostResults(h, outs, modelName);
  }

  /**
   * runHost() with the evaluation on the stream's evaluation thread (mx.HostProgram.tryRunAsync):
   * for runs too long to hold the calling thread for (session.ts, shortEvalMs).
   */
  runHostAsync(
    feeds: Record<string, HostTensor | Value>,
    modelName: string,
    mode: OneCallMode,
  ): Promise<Record<string, HostTensor | Value>> | undefined {
    const h = this.host!;
    const t0 = performance.now();
    // Undefined where that thread cannot run it (a GPU stream, the static executor off): the
    // caller takes the usual path, which evaluates there.
    const running = h.program.tryRunAsync(...this.hostArgs(h, feeds, mode));
    return running?.then((outs) => {
      // The evaluation's own time (shortEvalMs compares it): with the hand-offs it would stay over
      // the threshold once over it.
      this.evalMs = h.program.lastAsyncMs ?? performance.now() - t0;
      this.asyncInARow++;
      return this.hostResults(h, outs, modelName);
    });
  }

  /** Whether the next one-call run evaluates on the calling thread (runsInline), from this signature's last runs. */
  hostRunsInline(shortEvalMs: number): boolean {
    return runsInline(this.evalMs, this.asyncInARow, shortEvalMs, this.lastInlineMs === Number.POSITIVE_INFINITY ? 1 : INLINE_PROBE_EVERY);
  }

  /** A one-call run's arguments: each feed's data or array, and which arrays it may consume. */
  private hostArgs(
    h: HostRun,
    feeds: Record<string, HostTensor | Value>,
    mode: OneCallMode,
  ): [(ArrayBufferView | mx.Array)[], boolean[] | undefined] {
    const args = h.feeds.map((n, k) =>
      h.deviceFeeds[k] ? (feeds[n] as DeviceValue).array : ((feeds[n] as HostTensor).data as ArrayBufferView),
    );
    const consume = mode.donate.size ? h.feeds.map((n, k) => h.deviceFeeds[k] && mode.donate.has(n)) : undefined;
    return [args, consume];
  }

  /** A one-call run's fetches from its program's results, after its guards' flags are checked. */
  private hostResults(h: HostRun, outs: (mx.TypedArray | mx.Array)[], modelName: string): Record<string, HostTensor | Value> {
    countTransfers(h.hostFeeds, h.inBytes, h.fetched.length - h.keptCount, h.outBytes);
    if (h.guards.length) {
      const n = this.groups[0].kind === 'segment' ? this.groups[0].outputs.length : 0;
      const flags = outs[n] as Uint8Array;
      const i = flags.findIndex((b) => b !== 0);
      if (i >= 0) {
        let k = n + 1;
        for (let j = 0; j < i; j++) if (h.guards[j].hasDetail) k++;
        const g = h.guards[i];
        const detail = g.hasDetail ? Array.from(outs[k] as ArrayLike<number | bigint>, Number) : [];
        // The results kept on the device go with the failed run.
        for (const o of outs) if (o instanceof mx.Array) o.dispose();
        throw new NodeExecutionError(modelName, g.node, g.opType, new Error(g.describe(detail)));
      }
    }
    const result: Record<string, HostTensor | Value> = {};
    this.fetches.forEach((f, i) => {
      const { index, onnxType, dims, kept } = h.fetched[i];
      result[f] = kept
        ? { kind: 'device', array: outs[index] as mx.Array, onnxType }
        : { dtype: onnxType, dims: [...dims], data: outs[index] as HostTensor['data'] };
    });
    return result;
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
          if (this.host === undefined && this.groups.length === 1) {
            const slot = (a: mx.Array): mx.HostSlot => ({ dtype: a.dtype, shape: a.shape });
            const run = env.run;
            this.replayed = {
              args: args.map(slot),
              outs: outs.map(slot),
              deviceFeeds: g.inputs.map((n) => run.deviceFeeds.has(n)),
              kept: this.fetches.map((f) => run.keptOnDevice(f)),
            };
          }
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
      // Flags of shape [1] (mx.ext.boundedIndices gives them so) join with no node of their own.
      if (run.guards.length) {
        const flags = run.guards.map((x) => mx.reshape(mx.astype(x.bad, 'bool'), [1]));
        outs.push(flags.length === 1 ? flags[0] : mx.concatenate(flags, 0));
      }
      for (const x of run.guards) if (x.detail) outs.push(x.detail);
      return outs;
    };
    return this.setup.tracer === 'capture' ? mx.captureGraph(body) : mx.compile(body);
  }

  /** Frees the traces. */
  dispose(): void {
    this.host = null;
    this.replayed = undefined;
    for (const g of this.groups) if (g.kind === 'segment' && g.compiled) g.compiled.dispose();
  }
}
