// The one way from bytes to a plan, shared by sessions and by checkModel: decode, expand
// functions, validate the graph, then plan every node against the registry.
import * as mx from '@mlx/core';
import {
  DEFAULT_DOMAIN,
  checkSchemas,
  decodeModel,
  knownOpsetRange,
  expandFunctions,
  validateGraph,
  type ExternalDataSpec,
  type ModelIR,
} from '../onnx/index.js';
import { defaultRegistry } from '../ops/index.js';
import type { OpRegistry } from '../registry/registry.js';
import { RefusedNodeError, type UnsupportedNode } from '../errors.js';
import type { GraphPlan } from './graph-plan.js';
import { planGraph } from './plan.js';
import type { FallbackPartition } from './graph-plan.js';
import { contractFallback, findPartitions } from './partition.js';
import { rewriteGraph, type RewriteCounts, type RewriteSelection, type RewriteTarget } from './rewrite/index.js';

export interface PrepareOptions {
  /** The model file, for external data and messages. */
  modelPath?: string;
  /** External data for models given as bytes (onnxruntime-common's `externalData`). */
  externalData?: ExternalDataSpec[];
  /** An alternative op registry (tests, experiments). */
  registry?: OpRegistry;
  /** The model's name in messages (default: modelPath, else '<bytes>'). */
  modelName?: string;
  /** Op types the provider declines ('Softmax', or 'com.microsoft::Attention'). */
  disabledOps?: readonly string[];
  /**
   * Split the plan into MLX and fallback partitions (partition.ts) when MLX does not take every
   * node; without it the plan keeps every node and `unsupported` says which MLX cannot run.
   */
  partition?: boolean;
  /** Plan-time graph rewrites (rewrite/index.ts): default all, unless MLX_ORT_REWRITES says otherwise. */
  rewrites?: RewriteSelection;
  /** What the session runs on, for the rewrites that depend on it (packed weights: CPU only). */
  rewriteTarget?: RewriteTarget;
  /**
   * Report invalid nodes (UnsupportedNode.invalid) in `unsupported` instead of throwing their
   * RefusedNodeError (checkModel); sessions refuse them.
   */
  listInvalid?: boolean;
  /**
   * onnxruntime's freeDimensionOverrides: symbolic dimensions of the graph inputs fixed by their
   * dim_param or their denotation ('DATA_BATCH'); a name that matches none is ignored, as there.
   */
  freeDimensionOverrides?: Readonly<Record<string, number>>;
}

export interface PreparedModel {
  model: ModelIR;
  plan: GraphPlan;
  /** Nodes the registry does not take, subgraphs included, with reasons. */
  unsupported: UnsupportedNode[];
  rewrites: RewriteCounts;
  /** With `partition`: the fallback partitions, whose nodes the plan now holds as one node each. */
  fallbacks: FallbackPartition[];
}

export function prepareModel(bytes: Uint8Array, options: PrepareOptions = {}): PreparedModel {
  const model = decodeModel(bytes, { modelPath: options.modelPath, externalData: options.externalData, hostBytes: mx.populatedBytes });
  if (options.freeDimensionOverrides) overrideFreeDimensions(model, options.freeDimensionOverrides);
  // A model that imports other domains but not the default one gets its newest opset, as
  // onnxruntime gives it (an empty opset_import is refused by decodeModel).
  if (!model.opsetImports.has(DEFAULT_DOMAIN)) model.opsetImports.set(DEFAULT_DOMAIN, knownOpsetRange(DEFAULT_DOMAIN)![1]);
  expandFunctions(model);
  validateGraph(model.graph);
  const modelName = options.modelName ?? options.modelPath ?? '<bytes>';
  checkSchemas(model, modelName);
  // disabledOps keeps the graph as written: a rewrite could fold a disabled op into a fused node
  // MLX takes (or that onnxruntime, in a fallback partition, would not know).
  const selection = options.disabledOps?.length ? false : options.rewrites;
  const rewrites = rewriteGraph(model.graph, selection, options.registry ?? defaultRegistry, options.rewriteTarget);
  return { ...planModel(model, { ...options, modelName }), rewrites };
}

/**
 * Fixes the graph inputs' symbolic dimensions named (by dim_param or denotation) in `overrides`,
 * as onnxruntime does at load: a feed of another size is refused. The inputs' metadata show the
 * file's shape (`declared`), as onnxruntime's do. A dimension the file already fixes keeps its size.
 */
export function overrideFreeDimensions(model: ModelIR, overrides: Readonly<Record<string, number>>): void {
  const g = model.graph;
  for (const input of g.inputs) {
    const t = input.type;
    if (t.kind !== 'tensor' || !t.shape) continue;
    const declared = t.shape;
    t.shape = t.shape.map((d, i) => {
      if (typeof d === 'number') return d;
      const own = (k: string | null | undefined) => (k && Object.hasOwn(overrides, k) ? overrides[k] : undefined);
      const byName = own(d);
      const byDenotation = own(t.denotations?.[i]);
      return byName ?? byDenotation ?? d;
    });
    if (t.shape.some((d, i) => d !== declared[i])) t.declared = declared;
  }
}

/**
 * Plans a model prepareModel decoded and rewrote (again, for a re-plan: `forced` nodes then fall
 * back, PlanOptions.forced); the graph's initializers must all be there.
 */
export function planModel(
  model: ModelIR,
  options: PrepareOptions & { modelName: string; forced?: ReadonlyMap<object, string> },
): Omit<PreparedModel, 'rewrites'> {
  const unsupported: UnsupportedNode[] = [];
  const plan = planGraph(
    model.graph,
    {
      registry: options.registry ?? defaultRegistry,
      opsets: model.opsetImports,
      modelName: options.modelName,
      disabledOps: disabledSet(options.disabledOps),
      forced: options.forced,
    },
    unsupported,
  );
  const invalid = unsupported.filter((u) => u.invalid);
  if (invalid.length && !options.listInvalid) throw invalidNodesError(options.modelName, invalid);
  const fallbacks = options.partition && unsupported.length ? contractFallback(plan, model, findPartitions(plan)) : [];
  return { model, plan, unsupported, fallbacks };
}

/**
 * The error create() gives for invalid nodes, whether or not a fallback is allowed: `model M, node
 * 'n' (Op): what is wrong`, one line per node after the first.
 */
function invalidNodesError(model: string, nodes: UnsupportedNode[]): RefusedNodeError {
  const line = (u: UnsupportedNode) => `node '${u.nodeName}' (${u.opType}): ${u.reason.replace(/^invalid node: /, '')}`;
  if (nodes.length === 1) return new RefusedNodeError(`model ${model}, ${line(nodes[0])}`);
  return new RefusedNodeError(`model ${model} has ${nodes.length} invalid nodes:\n${nodes.map((u) => `  - ${line(u)}`).join('\n')}`);
}

function disabledSet(ops: readonly string[] | undefined): ReadonlySet<string> | undefined {
  if (ops === undefined) return undefined;
  if (!Array.isArray(ops) || ops.some((o) => typeof o !== 'string' || !o))
    throw new TypeError(`disabledOps must be an array of op types ('Softmax', 'com.microsoft::Attention'), got ${JSON.stringify(ops)}`);
  return new Set(ops);
}
