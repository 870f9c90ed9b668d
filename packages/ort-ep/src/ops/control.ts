// Control flow: If, Loop, Scan. Bodies are planned with the graph (planGraph plans every graph
// attribute) and run through ctx.runSubgraph, which resolves outer-scope names.
import * as mx from '@mlx/core';
import { OnnxDataType, allocHost } from '../onnx/index.js';
import type { Attrs } from '../registry/attrs.js';
import type { GraphIR } from '../onnx/index.js';
import type { OpContext, OpEntry } from '../registry/types.js';
import { invalidNode, onnxOp } from '../registry/op.js';
import type { Value } from '../runtime/value.js';
import { ResourceLimitError } from '../errors.js';
import { hostNumbers, intsIfGiven, normAxis } from './helpers/util.js';

/** A condition input: exactly one element (as onnxruntime requires), true when not 0. */
function truthy(ctx: OpContext, i: number, op: string): boolean {
  const values = hostNumbers(ctx.host(i));
  if (values.length !== 1)
    throw new RangeError(`${op} nodes condition input must have exactly one element, got shape [${ctx.shape(i).join(', ')}]`);
  return values[0] !== 0;
}

const ifEntry = onnxOp('If', 1, {
  parse: (attrs) => ({ thenBranch: attrs.graph('then_branch'), elseBranch: attrs.graph('else_branch') }),
  run: (ctx) => ctx.runSubgraph(truthy(ctx, 0, 'If') ? ctx.params.thenBranch : ctx.params.elseBranch, []),
});

const bodyOf = (attrs: Attrs): GraphIR => attrs.graph('body');

// ---- the budget of iterations ----
// ONNX Runtime runs a Loop for as long as its trip count and condition say. Here what the
// iterations accumulate counts against the session's memory budget: every scan output stacks
// one value per iteration (maxTensorBytes for the stacked tensor), and every iteration's values
// stay alive until the run ends (maxSessionBytes for their sum). A loop that must exceed the budget
// is refused after its first iteration, before it runs on; one that might stop early fails at the
// iteration that passes the budget. A long loop pauses every PAUSE_MS in run() (its state is
// evaluated off the JS thread, the event loop turns, RunOptions.terminate can stop it).

const PAUSE_MS = 10;

/** Bytes of the device arrays of a value not counted yet (host tensors, shape math, are not the budget's). */
function newBytes(v: Value, counted: WeakSet<mx.Array>): number {
  if (v.kind === 'device') {
    if (counted.has(v.array)) return 0;
    counted.add(v.array);
    return v.array.nbytes;
  }
  if (v.kind === 'sequence') return v.items.reduce((n, x) => n + newBytes(x, counted), 0);
  return 0;
}

/** The arrays of `values` and `scans` (from iteration `from` on) not evaluated yet: what a pause evaluates. */
function pending(values: readonly Value[], scans: readonly mx.Array[][], from: number, out: mx.Array[] = []): mx.Array[] {
  for (const v of values) {
    if (v.kind === 'device') {
      if (!v.array.isAvailable()) out.push(v.array);
    } else if (v.kind === 'sequence') pending(v.items, [], 0, out);
  }
  for (const list of scans) for (let i = from; i < list.length; i++) if (!list[i].isAvailable()) out.push(list[i]);
  return out;
}

const fmt = (n: number) => n.toLocaleString('en-US');

/** What the iterations of a Loop or Scan accumulate, checked against the run's budget. */
class IterationBudget {
  /** Bytes retained so far: scan outputs and the state of every iteration. */
  retained = 0;
  private readonly counted = new WeakSet<mx.Array>();
  /** Per scan output: the shape of its first iteration and the bytes stacked so far. */
  readonly shapes: (number[] | undefined)[];
  readonly stacked: number[];

  constructor(
    private readonly ctx: OpContext,
    scanCount: number,
  ) {
    this.shapes = new Array(scanCount).fill(undefined);
    this.stacked = new Array(scanCount).fill(0);
  }

  private fail(message: string): never {
    throw new ResourceLimitError(`model ${this.ctx.modelName}, ${this.ctx.where}: ${message}`);
  }

  /**
   * Records iteration `it`'s state and scan outputs; `total` is the number of iterations the node
   * will run whatever the data say (the trip count of a Loop whose condition cannot change, the
   * scan axis of a Scan), or undefined where the condition may stop it earlier.
   */
  add(it: number, state: readonly Value[], scans: readonly mx.Array[], total?: number): void {
    const { maxTensorBytes, maxSessionBytes } = this.ctx.limits;
    let iterBytes = 0;
    for (const v of state) iterBytes += newBytes(v, this.counted);
    scans.forEach((a, k) => {
      const shape = a.shape;
      const first = this.shapes[k];
      if (!first) this.shapes[k] = shape;
      else if (first.length !== shape.length || first.some((d, i) => d !== shape[i]))
        throw new RangeError(
          `scan output ${k} has shape [${shape.join(', ')}] in iteration ${it} and [${first.join(', ')}] in the first: the iterations of a scan output must agree`,
        );
      const b = a.nbytes;
      if (!this.counted.has(a)) {
        this.counted.add(a);
        iterBytes += b;
      }
      this.stacked[k] += b;
      if (maxTensorBytes && total !== undefined && b * total > maxTensorBytes)
        this.fail(
          `scan output ${k} would stack ${fmt(total)} iterations of shape [${shape.join(', ')}] ${a.dtype}, ${fmt(b * total)} bytes, over the limit of ${fmt(maxTensorBytes)} bytes per tensor (maxTensorBytes)`,
        );
      if (maxTensorBytes && this.stacked[k] > maxTensorBytes)
        this.fail(
          `scan output ${k} stacks ${fmt(this.stacked[k])} bytes after ${fmt(it + 1)} iterations of shape [${shape.join(', ')}] ${a.dtype}, over the limit of ${fmt(maxTensorBytes)} bytes per tensor (maxTensorBytes)`,
        );
    });
    this.retained += iterBytes;
    if (maxSessionBytes && total !== undefined && iterBytes * total > maxSessionBytes)
      this.fail(
        `${fmt(total)} iterations of ${fmt(iterBytes)} bytes each (state and scan outputs, all kept until the run ends) need ${fmt(iterBytes * total)} bytes, over the limit of ${fmt(maxSessionBytes)} bytes (maxSessionBytes)`,
      );
    if (maxSessionBytes && this.retained > maxSessionBytes)
      this.fail(
        `its iterations keep ${fmt(this.retained)} bytes (state and scan outputs) after ${fmt(it + 1)} iterations, over the limit of ${fmt(maxSessionBytes)} bytes (maxSessionBytes)`,
      );
  }
}

/**
 * Whether a Loop body's condition output is its condition input passed on unchanged (directly,
 * through Identity) or a constant true: the loop then runs its full trip count.
 */
function condIsFixed(body: GraphIR): boolean {
  let name = body.outputs[0]?.name;
  const condIn = body.inputs[1]?.name;
  if (!name || !condIn) return false;
  for (let hops = 0; hops < 8; hops++) {
    if (name === condIn) return true;
    const init = body.initializers.get(name);
    if (init) return init.dtype === OnnxDataType.BOOL && hostNumbers(init).length === 1 && hostNumbers(init)[0] !== 0;
    const producer = body.nodes.find((n) => n.outputs.includes(name!));
    if (!producer || (producer.domain && producer.domain !== 'ai.onnx')) return false;
    if (producer.opType === 'Identity') name = producer.inputs[0];
    else if (producer.opType === 'Constant') {
      const a = producer.attributes.get('value');
      return (
        a?.type === 'tensor' && a.value.dtype === OnnxDataType.BOOL && hostNumbers(a.value).length === 1 && hostNumbers(a.value)[0] !== 0
      );
    } else return false;
  }
  return false;
}

/** A Loop's or Scan's progress across a pause. */
interface Progress<S> {
  /** The next iteration. */
  next: number;
  state: S;
  scans: mx.Array[][];
  budget: IterationBudget;
}

interface LoopParams {
  body: GraphIR;
  /** The body's condition output cannot change (condIsFixed). */
  fixedCond: boolean;
}

/**
 * Loop(M, cond, v_initial...) with body(iter, cond, v...) -> (cond, v..., scan_outputs...). The trip
 * count and the condition are read on the host each iteration (data-dependent control flow).
 */
const loopEntry = onnxOp<LoopParams>('Loop', 1, {
  parse: (attrs) => {
    const body = bodyOf(attrs);
    return { body, fixedCond: condIsFixed(body) };
  },
  check: (ctx) => {
    const { body } = ctx.params;
    const carried = Math.max(0, ctx.node.inputs.length - 2);
    if (body.inputs.length !== 2 + carried)
      throw invalidNode(`the body has ${body.inputs.length} inputs; a Loop with ${carried} loop-carried value(s) needs ${2 + carried}`);
    if (body.outputs.length < 1 + carried)
      throw invalidNode(
        `the body has ${body.outputs.length} outputs; a Loop with ${carried} loop-carried value(s) needs at least ${1 + carried}`,
      );
    if (ctx.node.outputs.length !== body.outputs.length - 1)
      throw invalidNode(`the node has ${ctx.node.outputs.length} outputs and its body ${body.outputs.length - 1} besides the condition`);
    return undefined;
  },
  run: (ctx) => {
    const { body, fixedCond } = ctx.params;
    const maxTrip = ctx.has(0) ? Number(hostNumbers(ctx.host(0))[0]) : Infinity;
    let cond = ctx.has(1) ? truthy(ctx, 1, 'Loop') : true;
    let carried: Value[] = [];
    for (let i = 2; i < ctx.inputCount; i++) carried.push(ctx.value(i));
    const nScan = body.outputs.length - 1 - carried.length;
    let scans: mx.Array[][] = Array.from({ length: nScan }, () => []);
    let budget = new IterationBudget(ctx, nScan);
    let it = 0;
    const resumed = ctx.resume<Progress<{ carried: Value[]; cond: boolean }>>();
    if (resumed) {
      ({ next: it, scans, budget } = resumed);
      ({ carried, cond } = resumed.state);
    }
    // The loop runs its whole trip count when nothing can stop it earlier.
    const total = fixedCond && cond && Number.isFinite(maxTrip) ? Math.max(0, maxTrip) : undefined;
    const pausable = ctx.canPause();
    const t0 = pausable ? performance.now() : 0;
    for (; it < maxTrip && cond; it++) {
      if (pausable && it > 0 && performance.now() - t0 > PAUSE_MS) {
        ctx.pause(pending(carried, scans, resumed?.next ?? 0), {
          next: it,
          state: { carried, cond },
          scans,
          budget,
        } satisfies Progress<{ carried: Value[]; cond: boolean }>);
      }
      const iter: Value = { kind: 'host', tensor: { dtype: OnnxDataType.INT64, dims: [], data: BigInt64Array.of(BigInt(it)) } };
      const condV: Value = { kind: 'host', tensor: { dtype: OnnxDataType.BOOL, dims: [], data: Uint8Array.of(1) } };
      const outs = ctx.runSubgraph(body, [iter, condV, ...carried]);
      const c = outs[0];
      carried = outs.slice(1, 1 + carried.length);
      const stepScans = outs.slice(1 + carried.length).map((v) => ctx.toArray(v));
      stepScans.forEach((a, k) => scans[k].push(a));
      budget.add(it, carried, stepScans, total);
      if (c.kind === 'host') cond = hostNumbers(c.tensor)[0] !== 0;
      else if (c.kind === 'device') {
        // The condition is read each iteration: its evaluation stays within the budget.
        mx.evaluateWithin([c.array], { maxArrayBytes: ctx.limits.maxTensorBytes, maxTotalBytes: ctx.limits.maxSessionBytes });
        cond = Number(c.array.item()) !== 0;
      }
    }
    // No iteration: each scan output is empty, of shape [0, ...] its per-iteration shape, as
    // onnxruntime gives it: the body's declared shape where it is static, else the shape a trace
    // of the body (on the initial values, nothing evaluated) gives.
    let traced: Value[] | undefined;
    const traceOnce = () => {
      if (!traced) {
        const iter: Value = { kind: 'host', tensor: { dtype: OnnxDataType.INT64, dims: [], data: BigInt64Array.of(0n) } };
        const condV: Value = { kind: 'host', tensor: { dtype: OnnxDataType.BOOL, dims: [], data: Uint8Array.of(1) } };
        traced = ctx.traceSubgraph(body, [iter, condV, ...carried]) ?? [];
      }
      return traced;
    };
    const scanOut = scans.map((vs, k) => {
      if (!vs.length) {
        const decl = body.outputs[1 + carried.length + k];
        let et: number = decl.type.kind === 'tensor' && decl.type.elemType ? decl.type.elemType : OnnxDataType.FLOAT;
        const shape = decl.type.kind === 'tensor' ? decl.type.shape : undefined;
        let inner = shape?.every((d) => typeof d === 'number' && d >= 0) ? (shape as number[]) : undefined;
        if (!inner) {
          const t = traceOnce()[1 + carried.length + k];
          if (t?.kind === 'device') {
            inner = t.array.shape;
            et = t.onnxType ?? et;
          } else if (t?.kind === 'host') {
            inner = t.tensor.dims;
            et = t.tensor.dtype;
          }
        }
        return { kind: 'host', tensor: { dtype: et, dims: [0, ...(inner ?? [])], data: allocHost(et, 0) } } as Value;
      }
      return mx.stack(vs, 0);
    });
    return [...carried, ...scanOut];
  },
});

/** Scan (opset 9+): iterates over axes of the scan inputs, carrying state. */
interface ScanParams {
  body: GraphIR;
  scanInputs: number;
  /** Per scan input/output; absent: axis 0, forward (0) every one. */
  inAxes?: number[];
  inDirs?: number[];
  outAxes?: number[];
  outDirs?: number[];
}

const parseScan = (attrs: Attrs): ScanParams => ({
  body: bodyOf(attrs),
  scanInputs: attrs.int('num_scan_inputs'),
  inAxes: intsIfGiven(attrs, 'scan_input_axes'),
  inDirs: intsIfGiven(attrs, 'scan_input_directions'),
  outAxes: intsIfGiven(attrs, 'scan_output_axes'),
  outDirs: intsIfGiven(attrs, 'scan_output_directions'),
});

/**
 * The structure a Scan must have, checked at plan time: `leading` inputs before the states (Scan-8's
 * sequence_lens), num_scan_inputs between 1 and the inputs that follow them, a body input per
 * state and scan input, a body output per state and node output, and attribute lists of one entry
 * per scan input or output.
 */
function checkScan(
  node: GraphIR['nodes'][number],
  body: GraphIR,
  nScanIn: number,
  leading: number,
  lists: [string, number[] | undefined, 'in' | 'out'][],
): void {
  const rest = node.inputs.length - leading;
  if (!Number.isInteger(nScanIn) || nScanIn < 1 || nScanIn > rest)
    throw invalidNode(`num_scan_inputs ${nScanIn} is out of range: the node has ${rest} state and scan input(s)`);
  const nState = rest - nScanIn;
  if (body.inputs.length !== rest)
    throw invalidNode(`the body has ${body.inputs.length} inputs; ${nState} state(s) and ${nScanIn} scan input(s) need ${rest}`);
  if (body.outputs.length < nState) throw invalidNode(`the body has ${body.outputs.length} outputs, fewer than its ${nState} state(s)`);
  if (node.outputs.length !== body.outputs.length)
    throw invalidNode(`the node has ${node.outputs.length} outputs and its body ${body.outputs.length}`);
  const nScanOut = body.outputs.length - nState;
  for (const [name, list, side] of lists) {
    const want = side === 'in' ? nScanIn : nScanOut;
    if (list && list.length !== want) throw invalidNode(`${name} has ${list.length} entries for ${want} scan ${side}put(s)`);
  }
}

const scanEntry = onnxOp('Scan', 9, {
  parse: parseScan,
  check: (ctx) => {
    const p = ctx.params;
    checkScan(ctx.node, p.body, p.scanInputs, 0, [
      ['scan_input_axes', p.inAxes, 'in'],
      ['scan_input_directions', p.inDirs, 'in'],
      ['scan_output_axes', p.outAxes, 'out'],
      ['scan_output_directions', p.outDirs, 'out'],
    ]);
    return undefined;
  },
  run: (ctx) => {
    const { body, scanInputs: nScanIn } = ctx.params;
    const nState = ctx.inputCount - nScanIn;
    const nScanOut = body.outputs.length - nState;
    const zeros = (n: number) => new Array<number>(n).fill(0);
    const inAxes = ctx.params.inAxes ?? zeros(nScanIn);
    const inDirs = ctx.params.inDirs ?? zeros(nScanIn);
    const outAxes = ctx.params.outAxes ?? zeros(nScanOut);
    const outDirs = ctx.params.outDirs ?? zeros(nScanOut);
    let state: Value[] = [];
    for (let i = 0; i < nState; i++) state.push(ctx.value(i));
    const scanIns = Array.from({ length: nScanIn }, (_, k) => {
      const a = ctx.input(nState + k);
      return { a, axis: normAxis(inAxes[k], a.ndim, `scan_input_axes[${k}]`) };
    });
    const steps = scanIns[0].a.shape[scanIns[0].axis];
    scanIns.forEach(({ a, axis }, k) => {
      if (a.shape[axis] !== steps)
        throw new RangeError(`scan input ${k} has ${a.shape[axis]} entries along its scan axis, scan input 0 has ${steps}`);
    });
    let outs: mx.Array[][] = Array.from({ length: nScanOut }, () => []);
    let budget = new IterationBudget(ctx, nScanOut);
    let t = 0;
    const resumed = ctx.resume<Progress<Value[]>>();
    if (resumed) ({ next: t, scans: outs, budget, state } = resumed);
    const pausable = ctx.canPause();
    const t0 = pausable ? performance.now() : 0;
    for (; t < steps; t++) {
      if (pausable && t > 0 && performance.now() - t0 > PAUSE_MS)
        ctx.pause(pending(state, outs, resumed?.next ?? 0), {
          next: t,
          state,
          scans: outs,
          budget,
        } satisfies Progress<Value[]>);
      const slices: Value[] = scanIns.map(({ a, axis }, k) => {
        const idx = inDirs[k] ? steps - 1 - t : t;
        const s = mx.take(a, mx.scalar(idx, 'int32'), axis);
        return { kind: 'device', array: s, onnxType: ctx.elemType(nState + k) };
      });
      const r = ctx.runSubgraph(body, [...state, ...slices]);
      state = r.slice(0, nState);
      const stepOuts = r.slice(nState).map((v) => ctx.toArray(v));
      stepOuts.forEach((a, k) => outs[k].push(a));
      budget.add(t, state, stepOuts, steps);
    }
    const scanOut = outs.map((list, k) => {
      const ordered = outDirs[k] ? [...list].reverse() : list;
      const stacked = mx.stack(ordered, 0);
      const axis = normAxis(outAxes[k], stacked.ndim, `scan_output_axes[${k}]`);
      return axis === 0 ? stacked : mx.moveaxis(stacked, 0, axis);
    });
    return [...state, ...scanOut];
  },
});

/**
 * Scan-8: inputs [sequence_lens?, states..., scan inputs...], every one with a leading batch axis;
 * each batch entry scans its own inputs along their next axis (reversed where `directions` says
 * so), and the outputs stack the entries again. Batch entries shorter than the scan axis
 * (sequence_lens) are refused at run time.
 */
interface Scan8Params {
  body: GraphIR;
  scanInputs: number;
  directions?: number[];
}

const scan8Entry = onnxOp<Scan8Params>('Scan', 8, {
  until: 8,
  parse: (attrs) => ({ body: bodyOf(attrs), scanInputs: attrs.int('num_scan_inputs'), directions: intsIfGiven(attrs, 'directions') }),
  check: (ctx) => {
    checkScan(ctx.node, ctx.params.body, ctx.params.scanInputs, 1, [['directions', ctx.params.directions, 'in']]);
    return undefined;
  },
  run: (ctx) => {
    const { body, scanInputs: nScanIn } = ctx.params;
    const nState = ctx.inputCount - 1 - nScanIn;
    const nScanOut = body.outputs.length - nState;
    const dirs = ctx.params.directions ?? new Array<number>(nScanIn).fill(0);
    const states = Array.from({ length: nState }, (_, i) => ctx.input(1 + i));
    const scans = Array.from({ length: nScanIn }, (_, k) => ctx.input(1 + nState + k));
    const batch = (states[0] ?? scans[0])?.shape[0] ?? 0;
    const steps = scans.length ? scans[0].shape[1] : 0;
    if (ctx.has(0)) {
      const short = hostNumbers(ctx.host(0)).find((n) => n !== steps);
      if (short !== undefined)
        throw new RangeError(
          `${ctx.where}: a sequence length of ${short} (the scan axis has ${steps}) is not supported; lengths must be the full axis`,
        );
    }
    const typeOf = (i: number) => ctx.elemType(i);
    for (const a of [...states, ...scans])
      if (a.ndim < 1 || a.shape[0] !== batch) throw new RangeError(`every state and scan input needs the batch axis of ${batch} first`);
    for (const a of scans)
      if (a.ndim < 2 || a.shape[1] !== steps) throw new RangeError(`every scan input needs ${steps} entries along axis 1`);
    const finals: mx.Array[][] = Array.from({ length: nState }, () => []);
    const outs: mx.Array[][] = Array.from({ length: nScanOut }, () => []);
    // One budget over the batch: the stacked outputs hold every entry's iterations.
    const budget = new IterationBudget(ctx, nScanOut);
    for (let b = 0; b < batch; b++) {
      const at = (a: mx.Array) => mx.take(a, mx.scalar(b, 'int32'), 0);
      let state: Value[] = states.map((a, i) => ({ kind: 'device', array: at(a), onnxType: typeOf(1 + i) }));
      const mine = scans.map(at);
      const stepOuts: mx.Array[][] = Array.from({ length: nScanOut }, () => []);
      for (let t = 0; t < steps; t++) {
        const slices: Value[] = mine.map((a, k) => ({
          kind: 'device',
          array: mx.take(a, mx.scalar(dirs[k] ? steps - 1 - t : t, 'int32'), 0),
          onnxType: typeOf(1 + nState + k),
        }));
        const r = ctx.runSubgraph(body, [...state, ...slices]);
        state = r.slice(0, nState);
        const step = r.slice(nState).map((v) => ctx.toArray(v));
        step.forEach((a, k) => stepOuts[k].push(a));
        budget.add(b * steps + t, state, step, batch * steps);
      }
      state.forEach((v, i) => finals[i].push(ctx.toArray(v)));
      stepOuts.forEach((list, k) => outs[k].push(mx.stack(list, 0)));
    }
    return [...finals.map((list) => mx.stack(list, 0)), ...outs.map((list) => mx.stack(list, 0))];
  },
});

export const controlOps: OpEntry[] = [ifEntry, loopEntry, scan8Entry, scanEntry];
