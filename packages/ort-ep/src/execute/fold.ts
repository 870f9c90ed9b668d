// Constant folding at plan time: nodes whose inputs are all constants run once, and their
// results join the plan's constants.
import * as mx from '@mlx/core';
import type { GraphPlan } from '../plan/plan.js';
import { Env } from './env.js';
import { runNode } from './run.js';

/** Folds nodes whose inputs are all constants, once, at plan time. Returns how many were folded. */
export function foldConstants(plan: GraphPlan): number {
  let folded = 0;
  const env = new Env(plan);
  const runSub = () => {
    throw new Error('subgraphs are not folded');
  };
  // Initializers that are also graph inputs are defaults a feed may override: not constants.
  const overridable = new Set(plan.graph.inputs.map((i) => i.name));
  for (const pn of plan.nodes) {
    if (!pn.entry || pn.attrs.graphs().length) continue;
    const ins = pn.node.inputs.filter((i) => i);
    if (!ins.every((i) => plan.constants.has(i) && !overridable.has(i))) continue;
    if (nondeterministic.has(pn.node.opType)) continue;
    try {
      runNode(pn, env, plan, runSub);
    } catch {
      continue; // leave it to run time, where the error names the run
    }
    for (const o of pn.node.outputs) {
      const v = o ? env.values.get(o) : undefined;
      if (!v) continue;
      if (v.kind === "device") mx.persist(v.array);
      plan.constants.set(o, v);
    }
    folded++;
  }
  return folded;
}

const nondeterministic = new Set(['RandomNormal', 'RandomUniform', 'RandomNormalLike', 'RandomUniformLike', 'Multinomial', 'Bernoulli', 'Dropout']);
