// Control flow: If, Loop, Scan. Bodies are planned with the graph (planGraph plans every graph
// attribute) and run through ctx.runSubgraph, which resolves outer-scope names.
import * as mx from '@mlx/core';
import { OnnxDataType } from '../onnx/index.js';
import type { Attrs } from '../registry/attrs.js';
import type { GraphIR } from '../onnx/index.js';
import type { OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import type { Value } from '../runtime/value.js';
import { hostNumbers, intsIfGiven, normAxis } from './helpers/util.js';

function truthy(ctx: OpContext, i: number): boolean {
  return hostNumbers(ctx.host(i)).some((v) => v !== 0);
}

const ifEntry = onnxOp('If', 1, {
  parse: (attrs) => ({ thenBranch: attrs.graph('then_branch'), elseBranch: attrs.graph('else_branch') }),
  run: (ctx) => ctx.runSubgraph(truthy(ctx, 0) ? ctx.params.thenBranch : ctx.params.elseBranch, []),
});

const bodyOf = (attrs: Attrs): GraphIR => attrs.graph('body');

/**
 * Loop(M, cond, v_initial...) with body(iter, cond, v...) -> (cond, v..., scan_outputs...). The trip
 * count and the condition are read on the host each iteration (data-dependent control flow).
 */
const loopEntry = onnxOp('Loop', 1, {
  parse: bodyOf,
  run: (ctx) => {
    const body = ctx.params;
    const maxTrip = ctx.has(0) ? Number(hostNumbers(ctx.host(0))[0]) : Infinity;
    let cond = ctx.has(1) ? truthy(ctx, 1) : true;
    let carried: Value[] = [];
    for (let i = 2; i < ctx.inputCount; i++) carried.push(ctx.value(i));
    const nScan = body.outputs.length - 1 - carried.length;
    const scans: Value[][] = Array.from({ length: nScan }, () => []);
    for (let it = 0; it < maxTrip && cond; it++) {
      const iter: Value = { kind: 'host', tensor: { dtype: OnnxDataType.INT64, dims: [], data: BigInt64Array.of(BigInt(it)) } };
      const condV: Value = { kind: 'host', tensor: { dtype: OnnxDataType.BOOL, dims: [], data: Uint8Array.of(1) } };
      const outs = ctx.runSubgraph(body, [iter, condV, ...carried]);
      const c = outs[0];
      cond = c.kind === 'host' ? hostNumbers(c.tensor)[0] !== 0 : c.kind === 'device' ? Number(c.array.item()) !== 0 : true;
      carried = outs.slice(1, 1 + carried.length);
      outs.slice(1 + carried.length).forEach((v, k) => scans[k].push(v));
    }
    const scanOut = scans.map((vs, k) => {
      if (!vs.length) {
        // No iteration: an empty scan output, typed from the body's declaration.
        const decl = body.outputs[1 + carried.length + k];
        const et = decl.type.kind === 'tensor' ? decl.type.elemType : OnnxDataType.FLOAT;
        return { kind: 'host', tensor: { dtype: et, dims: [0], data: new Float32Array(0) } } as Value;
      }
      return mx.stack(
        vs.map((v) => ctx.toArray(v)),
        0,
      );
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

const scanEntry = onnxOp('Scan', 9, {
  parse: parseScan,
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
      return { a, axis: normAxis(inAxes[k], a.ndim) };
    });
    const steps = scanIns.length ? scanIns[0].a.shape[scanIns[0].axis] : 0;
    const outs: mx.Array[][] = Array.from({ length: nScanOut }, () => []);
    for (let t = 0; t < steps; t++) {
      const slices: Value[] = scanIns.map(({ a, axis }, k) => {
        const idx = inDirs[k] ? steps - 1 - t : t;
        const s = mx.take(a, mx.scalar(idx, 'int32'), axis);
        return { kind: 'device', array: s, onnxType: ctx.elemType(nState + k) };
      });
      const r = ctx.runSubgraph(body, [...state, ...slices]);
      state = r.slice(0, nState);
      r.slice(nState).forEach((v, k) => outs[k].push(ctx.toArray(v)));
    }
    const scanOut = outs.map((list, k) => {
      const ordered = outDirs[k] ? [...list].reverse() : list;
      const stacked = mx.stack(ordered, 0);
      const axis = normAxis(outAxes[k], stacked.ndim);
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
    const finals: mx.Array[][] = Array.from({ length: nState }, () => []);
    const outs: mx.Array[][] = Array.from({ length: nScanOut }, () => []);
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
        r.slice(nState).forEach((v, k) => stepOuts[k].push(ctx.toArray(v)));
      }
      state.forEach((v, i) => finals[i].push(ctx.toArray(v)));
      stepOuts.forEach((list, k) => outs[k].push(mx.stack(list, 0)));
    }
    return [...finals.map((list) => mx.stack(list, 0)), ...outs.map((list) => mx.stack(list, 0))];
  },
});

export const controlOps: OpEntry[] = [ifEntry, loopEntry, scan8Entry, scanEntry];
