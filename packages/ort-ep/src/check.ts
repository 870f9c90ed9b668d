// Model-level answers from the registry: which nodes are claimed, which are not and why.
import { DEFAULT_DOMAIN, type ExternalDataSpec } from './onnx/index.js';
import type { OpRegistry } from './registry/registry.js';
import type { UnsupportedNode } from './errors.js';
import { prepareModel } from './plan/prepare.js';
import { summarizePartitions, type PartitionSummary } from './plan/partition.js';
import { resolveCpuBackend } from './runtime/onnxruntime.js';

export interface ModelCheck {
  nodes: number;
  /** Claimed nodes per `domain::OpType`. */
  claimed: Map<string, number>;
  unclaimed: UnsupportedNode[];
  opsets: Map<string, number>;
  /** How the graph splits into MLX and fallback partitions. */
  partitions: PartitionSummary;
  /** The CPU backend that would run fallback partitions, where one resolves. */
  cpuBackend?: string;
}

export function checkModel(
  bytes: Uint8Array,
  options: { modelPath?: string; externalData?: ExternalDataSpec[]; registry?: OpRegistry; disabledOps?: string[] } = {},
): ModelCheck {
  // The model's own nodes, as written: no rewrites.
  const { model, plan, unsupported } = prepareModel(bytes, { rewrites: false, listInvalid: true, ...options });
  const claimed = new Map<string, number>();
  for (const pn of plan.nodes) {
    if (!pn.entry) continue;
    const k = `${pn.node.domain || DEFAULT_DOMAIN}::${pn.node.opType}`;
    claimed.set(k, (claimed.get(k) ?? 0) + 1);
  }
  return {
    nodes: plan.nodes.length,
    claimed,
    unclaimed: unsupported,
    opsets: model.opsetImports,
    partitions: summarizePartitions(plan),
    cpuBackend: resolveCpuBackend()?.name,
  };
}
