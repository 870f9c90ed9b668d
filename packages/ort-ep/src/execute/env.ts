// The values of one execution of a graph: its own, then its plan's constants, then the enclosing graph's.
import type { GraphPlan } from '../plan/plan.js';
import type { Value } from '../runtime/value.js';

/** Values of one execution: this graph's, then the enclosing graph's. */
export class Env {
  readonly values = new Map<string, Value>();
  constructor(readonly plan: GraphPlan, readonly parent?: Env) {}
  get(name: string): Value | undefined {
    return this.values.get(name) ?? this.plan.constants.get(name) ?? this.parent?.get(name);
  }
}


