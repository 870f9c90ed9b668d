// The state of one run, and the values of one execution of a graph within it: the graph's own
// values, then its plan's constants, then the enclosing graph's.
import type { GraphPlan } from '../plan/plan.js';
import type { ConstantStore } from '../runtime/uploads.js';
import { RunUploads } from '../runtime/uploads.js';
import type { Value } from '../runtime/value.js';

/** What one run (session.run, or constant folding) holds while it builds the graph. */
export class RunState {
  readonly uploads: RunUploads;
  constructor(readonly constants: ConstantStore, readonly modelName: string) {
    this.uploads = new RunUploads(constants);
  }
}

export class Env {
  readonly values = new Map<string, Value>();
  constructor(readonly plan: GraphPlan, readonly run: RunState, readonly parent?: Env) {}
  get(name: string): Value | undefined {
    return this.values.get(name) ?? this.plan.constants.get(name) ?? this.parent?.get(name);
  }
}
