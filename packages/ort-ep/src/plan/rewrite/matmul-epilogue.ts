// mlx.fused::MatMulPacked -> an activation (the fused Gelu, erf or tanh form, or Relu, Sigmoid, Tanh)
// that alone reads its result -> one MatMulPacked with attribute `activation`: @mlx/sys's dense
// product applies it to each block of its output as the block is finished, still in cache, instead
// of a pass of its own over the whole result (a transformer's feed-forward GELU, [tokens, 4 x
// hidden], read and written again in every layer). A Gelu's bias joins the product's when the
// product has none. Runs after pack-matmul, whose products it takes.
import { OnnxDataType, type AttrValue, type NodeIR } from '../../onnx/index.js';
import { FUSED_DOMAIN } from '../../ops/mlx/fused.js';
import { type GraphView, fusedNode, isDefaultDomain } from './view.js';

/** The activation kind (as @mlx/sys names them) a node applies to its first input alone, else undefined. */
function kindOf(n: NodeIR): string | undefined {
  if (n.domain === FUSED_DOMAIN && n.opType === 'Gelu') {
    const a = n.attributes.get('approximate');
    return a?.type === 'string' && a.value === 'tanh'
      ? 'gelu_tanh'
      : a === undefined || (a.type === 'string' && a.value === 'none')
        ? 'gelu'
        : undefined;
  }
  if (!isDefaultDomain(n) || n.inputs.length !== 1) return undefined;
  return ({ Relu: 'relu', Sigmoid: 'sigmoid', Tanh: 'tanh' } as Record<string, string | undefined>)[n.opType];
}

export function matmulActivationRewrite(view: GraphView): void {
  for (const mm of view.graph.nodes) {
    if (view.isRemoved(mm) || mm.domain !== FUSED_DOMAIN || mm.opType !== 'MatMulPacked' || mm.attributes.has('activation')) continue;
    const act = view.soleReader(mm.outputs[0]);
    if (!act || view.isRemoved(act) || act.inputs[0] !== mm.outputs[0] || act.outputs.length !== 1 || !act.outputs[0]) continue;
    const kind = kindOf(act);
    if (!kind) continue;
    let bias = mm.inputs[2] ?? '';
    const extra = act.inputs[1] ?? '';
    if (extra) {
      // The Gelu's bias: a constant float32 vector of the product's columns, taken only where the product has none.
      const n = mm.attributes.get('n');
      const b = view.constant(extra);
      if (bias || n?.type !== 'int' || !b || b.dtype !== OnnxDataType.FLOAT || b.dims.length !== 1 || b.dims[0] !== n.value) continue;
      bias = extra;
    }
    const attrs: Record<string, AttrValue> = { ...Object.fromEntries(mm.attributes), activation: { type: 'string', value: kind } };
    view.replace([mm, act], fusedNode(view, 'MatMulPacked', mm, [mm.inputs[0], mm.inputs[1], ...(bias ? [bias] : [])], act.outputs, attrs));
  }
}
