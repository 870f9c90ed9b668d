// Constant folding at plan time: nodes whose inputs are all constants run once, and their
// results join the plan's constants (the session's ConstantStore keeps their uploads).
import * as mx from '@mlx/core';
import { elementCount, rawByteLength } from '../onnx/index.js';
import { isNondeterministic } from '../plan/graph-plan.js';
import { mxDtypeOf } from '../runtime/convert.js';
import type { ConstantStore } from '../runtime/uploads.js';
import { Env, RunState } from './env.js';
import type { GraphProgram } from './run.js';

/** Declares every host constant of a program (and its subprograms) to the store. */
export function registerConstants(program: GraphProgram, store: ConstantStore): void {
  for (const v of program.plan.constants.values()) if (v.kind === 'host') store.add(v.tensor);
  for (const sub of program.subprograms.values()) registerConstants(sub, store);
}

/** Folds nodes whose inputs are all constants, once. Returns how many were folded. */
export function foldConstants(program: GraphProgram, store: ConstantStore): number {
  const plan = program.plan;
  let folded = 0;
  const env = new Env(plan, new RunState(store, plan.modelName));
  plan.nodes.forEach((pn, idx) => {
    if (!pn.entry || pn.subgraphs.length) return;
    const ins = pn.node.inputs.filter((i) => i);
    if (!ins.every((i) => plan.constants.has(i) && !plan.overridable.has(i))) return;
    if (isNondeterministic(pn)) return;
    try {
      program.runNode(idx, env);
      // A data check that fails (an index out of range in constants) leaves the node to run time,
      // where the error names the run; a check that passes needs no repeating.
      const guards = env.run.guards;
      env.run.guards = [];
      if (guards.length) {
        const flags = mx.stack(guards.map((g) => mx.reshape(mx.astype(g.bad, 'bool'), [])));
        if ((flags.toTypedArray() as Uint8Array).some((b) => b !== 0)) throw new Error('a data check failed');
      }
    } catch {
      for (const o of pn.node.outputs) if (o) env.values.delete(o);
      return; // leave it to run time, where the error names the run
    }
    for (const o of pn.node.outputs) {
      const v = o ? env.values.get(o) : undefined;
      if (!v) continue;
      if (v.kind === 'device') mx.persist(v.array);
      else if (v.kind === 'host') store.add(v.tensor);
      plan.constants.set(o, v);
    }
    folded++;
  });
  return folded;
}

/** Constants at least this large (bytes) live on MLX only once the session is made. */
export const RESIDENT_BYTES = 64 << 10;

/**
 * Uploads every large constant of a program (initializers, folded host results) and replaces it
 * in the plan by its MLX array, dropping the host copy (and the graph's initializer entry), so a
 * model's weights are held once, by MLX. A node that later reads such a constant on the host gets
 * it back from MLX (a copy per read). Returns the bytes moved.
 */
export function makeConstantsResident(program: GraphProgram, store: ConstantStore): number {
  let moved = 0;
  const plan = program.plan;
  for (const [name, v] of plan.constants) {
    if (v.kind !== 'host' || !mxDtypeOf(v.tensor.dtype)) continue;
    const bytes = rawByteLength(v.tensor.dtype, elementCount(v.tensor.dims));
    if (bytes < RESIDENT_BYTES) continue;
    const array = store.makeResident(v.tensor);
    plan.constants.set(name, { kind: 'device', array, onnxType: v.tensor.dtype });
    if (plan.graph.initializers.delete(name)) (plan.residentInitializers ??= new Set()).add(name);
    moved += bytes;
  }
  for (const sub of program.subprograms.values()) moved += makeConstantsResident(sub, store);
  return moved;
}
