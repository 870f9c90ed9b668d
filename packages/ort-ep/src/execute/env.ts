// The state of one run, and the values of one execution of a graph within it: the graph's own
// values, then a compiled signature's static values, then its plan's constants, then the enclosing
// graph's.
import type * as mx from '@mlx/core';
import type { AttentionVjpOptions } from '@mlx/kernels';
import type { GraphPlan } from '../plan/graph-plan.js';
import type { ConstantStore } from '../runtime/uploads.js';
import { RunUploads } from '../runtime/uploads.js';
import type { Value } from '../runtime/value.js';
import type { Analysis } from './analysis.js';
import type { Profiler } from './profiler.js';

/** Memory a run may use (0: no limit). */
export interface MemoryLimits {
  /** The most bytes one tensor may take. */
  maxTensorBytes: number;
  /** The most bytes one evaluation may allocate in all. */
  maxSessionBytes: number;
}

export const NO_LIMITS: MemoryLimits = Object.freeze({ maxTensorBytes: 0, maxSessionBytes: 0 });

/** What a failed data check reports: its detail (read after evaluation), node and message. */
export interface GuardInfo {
  detail?: mx.Array;
  describe: (detail: number[]) => string;
  node: string;
  opType: string;
}

/** A data check an op made on the device (OpContext.guard). */
export interface Guard extends GuardInfo {
  bad: mx.Array;
}

/** Checks whose flags a compiled segment stacked already: flags[i] is guards[i]'s. */
export interface GuardSet {
  flags: mx.Array;
  guards: GuardInfo[];
}

const SHARED_VALUE = Symbol('shared value');

/** What one run (session.run, a trace, or constant folding) holds while it builds the graph. */
/** What a run tells the compiled signature it replays (signature.ts). */
export interface Replay {
  /** The run's evaluation succeeded, in `ms` milliseconds (wall time, as the run saw it). */
  evaluated(ms?: number): void;
  /** How long the signature's last successful evaluation took, in ms (Infinity before the first). */
  lastEvalMs(): number;
}

export class RunState {
  /** Guards not yet checked: they are evaluated with the next request and checked after it. */
  guards: Guard[] = [];
  /** Stacked checks of compiled segments, evaluated and checked like `guards`. */
  guardSets: GuardSet[] = [];
  /**
   * Set when a compiled segment traced during this run: its first evaluation builds the fused
   * kernels while queueing, so it goes to the worker thread (driver.ts).
   */
  freshTrace = false;
  readonly uploads: RunUploads;
  /** Set on a compiled path's first run of a signature: records what each node reads. */
  analysis?: Analysis;
  /** Set on a compiled path's run of a new signature that runs eagerly, unanalysed (runner.ts, MISS_STREAK). */
  unanalysed = false;
  /** Whether top-level nodes hand host reads of unevaluated arrays back to the driver (NeedsEval) instead of blocking. */
  deferSyncs = false;
  /** Feeds the run may consume (MlxRunOptions.donate), and whether an output stays on the device: kv-append.ts reads them. */
  donated: ReadonlySet<string> = new Set();
  keptOnDevice: (name: string) => boolean = () => false;
  /** The feeds that arrived as device arrays (not host tensors): a one-call run's form (signature.ts) depends on them. */
  deviceFeeds: ReadonlySet<string> = new Set();
  /**
   * Set on a replay of a signature whose every run has the same arrays (no steps) and whose
   * evaluation passed the memory budget once: it allocates the same again, so the driver skips
   * walking the graph to count it.
   */
  budgetKnown = false;
  /** The compiled signature this run replays, told when the run's evaluation succeeded. */
  replaying?: Replay;
  /**
   * Mixed precision (valueAndGrad and trainStep's `mixedPrecision`): every float32 array a node
   * reads is cast to this dtype first (once per array and run), so that the walk computes in it
   * from float32 values (master weights, feeds, constants) and float32 results alike.
   */
  autocast?: 'float16' | 'bfloat16';
  /** With autocast 'float16': float32 to float16, saturating at its largest finite value (grad.ts). */
  toFloat16?: mx.CompiledFunction;
  /**
   * The backward pass of attention nodes while differentiating (valueAndGrad and trainStep's
   * `attention`): handed to @mlx/kernels' scaledDotProductAttention as its `vjp` option.
   */
  attentionVjp?: AttentionVjpOptions;
  /** Set while mx.compile traces a segment (signature.ts): tracers, not data. */
  tracing = false;
  /** What a long-running node (Loop, Scan) stored when it paused (OpContext.pause), by its context. */
  readonly progress = new Map<object, unknown>();
  /** The session's profile while profiling: eagerly walked nodes and fallback partitions add their events. */
  profiler?: Profiler;
  /** Whether the caller asked the run to stop (RunOptions.terminate): checked between steps. */
  terminated: () => boolean = () => false;
  /** Values that several nodes of the run build alike (OpContext.shared), keyed by what they derive from. */
  private readonly memo = new Map<unknown, unknown>();
  /** Every array the run creates, freed when it ends (a run spans several synchronous steps). */
  readonly arrays = new Set<mx.Disposable>();

  constructor(
    readonly constants: ConstantStore,
    readonly modelName: string,
    readonly limits: MemoryLimits = NO_LIMITS,
  ) {
    this.uploads = new RunUploads(constants);
  }

  /** make()'s value, made once per run for the same parts (compared by identity: arrays, numbers, strings). */
  shared<T>(parts: readonly unknown[], make: () => T): T {
    let m = this.memo;
    for (const p of parts) {
      let next = m.get(p) as Map<unknown, unknown> | undefined;
      if (!next) m.set(p, (next = new Map()));
      m = next;
    }
    if (m.has(SHARED_VALUE)) return m.get(SHARED_VALUE) as T;
    const v = make();
    m.set(SHARED_VALUE, v);
    return v;
  }

  /** A tensor value as an MLX array (host tensors uploaded once per run). */
  toArray(v: Value, name: string): mx.Array {
    if (v.kind === 'device') return v.array;
    if (v.kind === 'host') return this.uploads.array(v.tensor);
    throw new Error(`value '${name}' is a ${v.kind}, not a tensor`);
  }
}

export class Env {
  readonly values = new Map<string, Value>();
  /**
   * Values shared by every run of a compiled signature (its folded shape math), read after the
   * run's own: a replay points at them instead of copying them in.
   */
  statics?: ReadonlyMap<string, Value>;
  /** 0 for the main graph, +1 per enclosing subgraph. */
  readonly depth: number;
  constructor(
    readonly plan: GraphPlan,
    readonly run: RunState,
    readonly parent?: Env,
  ) {
    this.depth = parent ? parent.depth + 1 : 0;
  }
  get(name: string): Value | undefined {
    return this.values.get(name) ?? this.statics?.get(name) ?? this.plan.constants.get(name) ?? this.parent?.get(name);
  }
}
