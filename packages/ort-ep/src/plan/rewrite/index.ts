// Plan-time graph rewrites: patterns that exporters spell as chains of small ops, replaced by one
// op that runs as one kernel (the fused CPU kernels of @mlx/sys on the CPU, MLX's fast ops on a
// GPU). They run on the main graph and its subgraphs after validation and before planning; each keeps the
// semantics of what it replaces (tests compare the outputs with the rewrites off). The order
// matters: the GELU and norm patterns contain a Pow that the Pow rewrite would otherwise take.
//
// Off with the session option `graphRewrites: false` or MLX_ORT_REWRITES=0; a list of names
// (option or comma-separated variable) keeps only those.
import { type GraphIR, subgraphsOf } from '../../onnx/index.js';
import { FUSED_DOMAIN } from '../../ops/mlx/fused.js';
import type { OpRegistry } from '../../registry/registry.js';
import { attentionRewrite } from './attention.js';
import { channelsLastRewrite } from './channels-last.js';
import { convBatchNormRewrite } from './conv-batch-norm.js';
import { convEpilogueRewrite } from './conv-epilogue.js';
import { dequantizeRewrite } from './dequantize.js';
import { fakeQuantizeRewrite } from './fake-quantize.js';
import { gatedActivationRewrite } from './gated-activation.js';
import { geluRewrite } from './gelu.js';
import { gemmRewrite, matmulAddRewrite } from './matmul-add.js';
import { layerNormRewrite, rmsNormRewrite } from './norms.js';
import { powRewrite } from './pow.js';
import { siblingMatmulRewrite } from './sibling-matmul.js';
import { matmulEpilogueRewrite } from './matmul-epilogue.js';
import { packMatmulRewrite } from './pack-matmul.js';
import { packedQkvRewrite } from './packed-qkv.js';
import { transposeMatmulRewrite } from './transpose-matmul.js';
import { GraphView, type RewriteTarget } from './view.js';

export type { RewriteTarget } from './view.js';

export const REWRITES = {
  // First: the constant weights it dequantizes are what the later passes match (and pack).
  'dequantize-constants': dequantizeRewrite,
  // After it: the constant DequantizeLinears are initializers by then; what is left are activations'.
  'fake-quantize': fakeQuantizeRewrite,
  gelu: geluRewrite,
  // Before rms-norm: a layer norm's d / Sqrt(ReduceMean(d^2) + eps) is itself an RMS norm of d.
  'layer-norm': layerNormRewrite,
  'rms-norm': rmsNormRewrite,
  'matmul-add': matmulAddRewrite,
  gemm: gemmRewrite,
  attention: attentionRewrite,
  // After matmul-add (it joins MatMulAdds too) and attention (whose pattern starts after the projections).
  'sibling-matmul': siblingMatmulRewrite,
  // After matmul-add, gemm and sibling-matmul: it packs the weights of their products too.
  'pack-matmul': packMatmulRewrite,
  // After pack-matmul: an activation and a residual Add after a packed product go into its epilogue.
  'matmul-epilogue': matmulEpilogueRewrite,
  // After gelu and sibling-matmul: act(gate) * up, over the joined gate and up product where there is one.
  'gated-activation': gatedActivationRewrite,
  // After sibling-matmul: a GroupQueryAttention fed its three parts takes the joined QKV, packed.
  'packed-qkv': packedQkvRewrite,
  // Beside pack-matmul (that one on CPU sessions, this one on GPU ones): the same products.
  'transpose-matmul': transposeMatmulRewrite,
  // Before conv-epilogue: the folded Conv is what it fuses with the activation after the norm.
  'conv-batch-norm': convBatchNormRewrite,
  'conv-epilogue': convEpilogueRewrite,
  // After conv-epilogue: it takes the fused convs too.
  'channels-last': channelsLastRewrite,
  pow: powRewrite,
} as const;

export type RewriteName = keyof typeof REWRITES;
/** true (default): all; false: none; a list: those. */
export type RewriteSelection = boolean | readonly RewriteName[];

/** How many patterns each rewrite replaced. */
export type RewriteCounts = Partial<Record<RewriteName, number>>;

function selected(option: RewriteSelection | undefined): RewriteName[] {
  const all = Object.keys(REWRITES) as RewriteName[];
  const env = process.env.MLX_ORT_REWRITES;
  let sel: RewriteSelection = option ?? true;
  if (option === undefined && env !== undefined && env !== '' && env !== '1') {
    sel = env === '0' || env === 'false' ? false : (env.split(',').map((s) => s.trim()) as RewriteName[]);
  }
  if (sel === true) return all;
  if (sel === false) return [];
  if (!Array.isArray(sel)) throw new TypeError(`graphRewrites must be true, false or a list of rewrite names, got ${String(sel)}`);
  for (const n of sel) if (!all.includes(n)) throw new TypeError(`unknown graph rewrite '${n}' (known: ${all.join(', ')})`);
  return all.filter((n) => sel.includes(n));
}

/** Applies the selected rewrites to `graph` in place; returns what each replaced. */
export function rewriteGraph(
  graph: GraphIR,
  option: RewriteSelection | undefined,
  registry: OpRegistry,
  target: RewriteTarget = {},
): RewriteCounts {
  const counts: RewriteCounts = {};
  // A registry without the fused ops (tests, experiments) gets the graph as written.
  if (!registry.lookup(FUSED_DOMAIN, 'Gelu', 1)) return counts;
  const names = selected(option);
  if (!names.length) return counts;
  // Derived initializers (packed weights) get names that no graph of the model uses.
  const taken = new Set<string>();
  collectNames(graph, taken);
  rewriteScope(graph, names, target, taken, counts);
  return counts;
}

/**
 * The passes on one graph, then on each subgraph of its nodes (If branches, Loop and Scan bodies:
 * exporters put whole models there, Silero VAD's in an If on the sample rate, merged decoders' in
 * an If on the cache). A subgraph's view sees its own nodes, initializers and Constants; values of
 * enclosing scopes are opaque to it (never constants), and the enclosing graph's view already pins
 * what the subgraph reads, so neither pass removes what the other needs.
 */
function rewriteScope(graph: GraphIR, names: RewriteName[], target: RewriteTarget, taken: Set<string>, counts: RewriteCounts): void {
  // One view for the passes in a row that replace nothing (most of them, on most models): indexing
  // the graph for each of the fourteen was a good part of a small model's create().
  let view: GraphView | undefined;
  for (const name of names) {
    if (!view?.reusable()) view = new GraphView(graph, target, taken);
    REWRITES[name](view);
    const n = view.commit();
    if (n) counts[name] = (counts[name] ?? 0) + n;
  }
  for (const node of graph.nodes) for (const { graph: sub } of subgraphsOf(node)) rewriteScope(sub, names, target, taken, counts);
}

/** Every value name of `graph` and its subgraphs: inputs, initializers, node outputs. */
function collectNames(graph: GraphIR, into: Set<string>): void {
  for (const i of graph.inputs) into.add(i.name);
  for (const k of graph.initializers.keys()) into.add(k);
  for (const n of graph.nodes) {
    for (const o of n.outputs) if (o) into.add(o);
    for (const { graph: sub } of subgraphsOf(n)) collectNames(sub, into);
  }
}
