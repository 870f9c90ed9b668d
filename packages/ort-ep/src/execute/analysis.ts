// What one eager run teaches about a feed signature (the compiled path's first run). A value is
// *dynamic* when its data depends on the feeds' data, and *shape-dynamic* when even its shape
// does (outputs of data-dependent nodes such as NonZero, or Reshape to a fed shape). Every node of
// the run is then one of:
// - 'static': it touched nothing dynamic (shape math on the feeds' shapes, constants): its host
//   results are the same for every run of the signature, so they are computed once and reused;
// - 'device': it used dynamic data only as MLX arrays: it belongs in a compiled segment;
// - 'step': it read dynamic data on the host (a fed shape, a condition, strings, NonZero): it runs
//   eagerly between segments on every run, after what it reads has been evaluated.
import type { Value } from '../runtime/value.js';

export type NodeClass = 'static' | 'device' | 'step';

/** The reads of one node (and of every node its subgraphs run). */
interface Frame {
  hostRead: boolean;
  dynamicUse: boolean;
  shapeDynamicUse: boolean;
  /** The feeds (bits, markFeed's) whose data what the node touched depends on. */
  taint: number;
}

export class Analysis {
  private readonly dynamic = new WeakSet<object>();
  private readonly shapeDynamic = new WeakSet<object>();
  private readonly frames: Frame[] = [];
  /** Which feeds (bits) each dynamic value's data depends on. */
  private readonly taints = new WeakMap<object, number>();
  /** The class of each top-level node that ran, by index. */
  readonly classes = new Map<number, NodeClass>();
  /**
   * Feeds (bits) whose data alone decided a host read: every host read of dynamic data whose
   * value depends on nothing but feeds of `specializable` adds them. Fixing those feeds' values
   * in the signature (runner.ts) turns the reads static.
   */
  hostReadFeeds = 0;

  /**
   * @param specializable feeds (bits) that could be fixed by value in the signature: host reads
   * that depend only on them are collected into hostReadFeeds.
   */
  constructor(private readonly specializable = 0) {}

  /** Marks a feed: its data is dynamic, its shape is part of the signature; `bit` names it in taints. */
  markFeed(v: Value, bit = 0): void {
    this.dynamic.add(v);
    if (bit) this.taints.set(v, (this.taints.get(v) ?? 0) | bit);
  }
  isDynamic(v: Value): boolean {
    return this.dynamic.has(v);
  }

  private touch(v: Value): void {
    const t = this.taints.get(v);
    if (t) for (const f of this.frames) f.taint |= t;
  }

  /** Input data read on the host (host(), hostIfKnown() of a host value, value() of a host value). */
  hostRead(v: Value): void {
    if (!this.dynamic.has(v)) return;
    const t = this.taints.get(v) ?? 0;
    // A read the signature can make static: its data depends on specializable feeds only (a
    // dynamic value without taint comes from elsewhere, e.g. a random node: never static).
    if (t && (t & ~this.specializable) === 0) this.hostReadFeeds |= t;
    for (const f of this.frames) {
      f.hostRead = true;
      f.dynamicUse = true;
      f.taint |= t;
    }
  }
  /** Input data used as an MLX array (or passed through on the device). */
  deviceUse(v: Value): void {
    if (!this.dynamic.has(v)) return;
    this.touch(v);
    for (const f of this.frames) f.dynamicUse = true;
    if (this.shapeDynamic.has(v)) for (const f of this.frames) f.shapeDynamicUse = true;
  }
  /** An input's shape read on the host: dynamic only when the shape itself depends on data. */
  shapeRead(v: Value): void {
    if (!this.shapeDynamic.has(v)) return;
    this.touch(v);
    for (const f of this.frames) {
      f.dynamicUse = true;
      f.shapeDynamicUse = true;
    }
  }

  begin(): void {
    this.frames.push({ hostRead: false, dynamicUse: false, shapeDynamicUse: false, taint: 0 });
  }

  /** Values a node hands to its subgraphs are as dynamic as what the node has touched so far. */
  markSubgraphInputs(values: Value[]): void {
    const f = this.frames.at(-1);
    if (!f?.dynamicUse) return;
    for (const v of values) {
      this.dynamic.add(v);
      if (f.taint) this.taints.set(v, (this.taints.get(v) ?? 0) | f.taint);
      if (f.shapeDynamicUse || f.hostRead) this.shapeDynamic.add(v);
    }
  }

  /**
   * Ends the innermost node: marks its outputs and, for a top-level node (`index` given),
   * classifies it. A node that produced a host value from dynamic data is a step too: host values
   * cannot be outputs of a compiled segment.
   */
  end(outputs: Value[], index?: number): void {
    const f = this.frames.pop()!;
    for (const v of outputs) {
      if (f.dynamicUse) this.dynamic.add(v);
      if (f.dynamicUse && f.taint) this.taints.set(v, (this.taints.get(v) ?? 0) | f.taint);
      if (f.hostRead || f.shapeDynamicUse) this.shapeDynamic.add(v);
    }
    if (index === undefined) return;
    let cls: NodeClass = f.hostRead ? 'step' : f.dynamicUse ? 'device' : 'static';
    if (cls === 'device' && outputs.some((v) => v.kind !== 'device' && v.kind !== 'none')) cls = 'step';
    this.classes.set(index, cls);
  }

  /** Abandons the innermost node (it threw; it will run again). */
  abort(): void {
    this.frames.pop();
  }
}
