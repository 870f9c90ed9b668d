// Growing KV caches of plain past/present graphs (GPT-2 and most transformers.js exports:
// present = Concat(past, new) on the sequence axis, past a graph input, present a graph output),
// kept in a reserve: a buffer with room for more rows, whose leading rows the present views. Each
// step writes its new rows into the reserve with a slice update and views one row more, instead of
// concatenating (a copy of the whole cache per step). When the run holds the reserve's only
// reference (the feed was donated, MlxRunOptions.donate), MLX writes into its buffer in place;
// otherwise it copies it, with the same values. A full reserve is replaced by one twice as large
// (the cache is copied once per doubling). Traced segments concatenate as before: the reserve is
// an optimisation of the eager walk, which is what a new context length (a new signature) runs.
import * as mx from '@mlx/core';
import type { GraphPlan } from '../plan/graph-plan.js';
import type { KvReserve, Value } from '../runtime/value.js';
import type { NodeContext } from './context.js';

/** The Concat nodes of a plan that append a fed cache to make an output. */
export function kvAppendNodes(plan: GraphPlan): Set<number> {
  const inputs = new Set(plan.graph.inputs.map((i) => i.name));
  const outputs = new Set(plan.graph.outputs.map((o) => o.name));
  const out = new Set<number>();
  plan.nodes.forEach((pn, idx) => {
    const n = pn.node;
    if (n.opType !== 'Concat' || (n.domain && n.domain !== 'ai.onnx') || n.inputs.length !== 2) return;
    if (inputs.has(n.inputs[0]) && !plan.constants.has(n.inputs[0]) && outputs.has(n.outputs[0])) out.add(idx);
  });
  return out;
}

const nextPow2 = (n: number) => 2 ** Math.ceil(Math.log2(Math.max(n, 1)));

/**
 * The append as a reserve update, or undefined where the node should run as a plain Concat: a
 * reserve is grown in place only when the run may consume the fed past (a past the caller keeps
 * would be copied with all its room), and a new one is made only for a present that stays on the
 * device, from an empty past or a consumed one.
 */
export function appendKv(ctx: NodeContext): Value | undefined {
  const run = ctx.env.run;
  if (!run.keptOnDevice(ctx.node.outputs[0])) return undefined;
  const v0 = ctx.peek(0);
  const consumed = run.donated.has(ctx.node.inputs[0]);
  if (v0.kind !== 'device' || !(consumed || v0.array.shape.some((d) => d === 0))) return undefined;
  const past = v0.array;
  const rank = past.ndim;
  const raw = ctx.params as number;
  const axis = raw < 0 ? raw + rank : raw;
  const fresh = ctx.input(1);
  ctx.value(0);
  if (axis < 0 || axis >= rank || fresh.ndim !== rank || fresh.dtype !== past.dtype) return undefined;
  const ps = past.shape;
  const fs = fresh.shape;
  if (ps.some((d, i) => i !== axis && d !== fs[i])) return undefined;
  const P = ps[axis];
  const T = P + fs[axis];
  const at = (shape: number[], k: number, v: number) => shape.map((d, i) => (i === k ? v : d));
  const zero = ps.map(() => 0);
  const ones = ps.map(() => 1);
  const r = v0.reserve;
  let buffer: mx.Array;
  if (consumed && r && r.axis === axis && r.buffer.shape[axis] >= T && r.buffer.shape.every((d, i) => i === axis || d === ps[i]))
    buffer = r.buffer;
  else {
    // A new reserve: room for the context doubled (at least 64 rows), the past copied in once.
    buffer = mx.zeros(at(ps, axis, Math.max(64, nextPow2(2 * T))), past.dtype);
    if (P > 0) buffer = mx.sliceUpdate(buffer, past, zero, ps, ones);
  }
  const updated = mx.sliceUpdate(buffer, fresh, at(zero, axis, P), at(ps, axis, T), ones);
  const present = mx.slice(updated, zero, at(ps, axis, T), ones);
  const reserve: KvReserve = { buffer: updated, axis };
  return { kind: 'device', array: present, onnxType: v0.onnxType, reserve };
}
