// Constant folding at plan time: nodes whose inputs are all constants run once, and their
// results join the plan's constants (the session's ConstantStore keeps their uploads).
import * as mx from '@mlx/core';
import { isNondeterministic } from '../plan/plan.js';
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
    } catch {
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
