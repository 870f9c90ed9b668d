// Model-level answers from the registry: which nodes are claimed, which are not and why.
import { decodeModel, expandFunctions, type ExternalDataSpec } from './onnx/index.js';
import { defaultRegistry } from './ops/index.js';
import { DEFAULT_DOMAIN, type OpRegistry } from './registry/registry.js';
import type { UnsupportedNode } from './errors.js';
import { planGraph } from './plan/plan.js';

export interface ModelCheck {
  nodes: number;
  /** Claimed nodes per `domain::OpType`. */
  claimed: Map<string, number>;
  unclaimed: UnsupportedNode[];
  opsets: Map<string, number>;
}

export function checkModel(bytes: Uint8Array, options: { modelPath?: string; externalData?: ExternalDataSpec[]; registry?: OpRegistry } = {}): ModelCheck {
  const model = decodeModel(bytes, { modelPath: options.modelPath, externalData: options.externalData });
  expandFunctions(model);
  const unclaimed: UnsupportedNode[] = [];
  const plan = planGraph(model.graph, { registry: options.registry ?? defaultRegistry, opsets: model.opsetImports, modelName: options.modelPath ?? '<bytes>' }, unclaimed);
  const bad = new Set(unclaimed.map((u) => u.nodeName + '\0' + u.opType));
  const claimed = new Map<string, number>();
  let nodes = 0;
  for (const pn of plan.nodes) {
    nodes++;
    if (bad.has(pn.node.name + '\0' + pn.node.opType)) continue;
    const k = `${pn.node.domain || DEFAULT_DOMAIN}::${pn.node.opType}`;
    claimed.set(k, (claimed.get(k) ?? 0) + 1);
  }
  return { nodes, claimed, unclaimed, opsets: model.opsetImports };
}
