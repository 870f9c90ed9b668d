// mlx.fused::MatMulPacked -> [Reshape] -> [an activation: the fused Gelu, erf or tanh form, or
// Relu, Sigmoid, Tanh] -> [Add(residual)], each alone reading the one before, at least an
// activation or an Add -> one MatMulPacked with attribute `activation` and the residual as a fourth
// input: @mlx/sys's dense product applies them to each block of its output as the block is
// finished, still in cache, instead of passes of their own over the whole result (a transformer's
// feed-forward GELU, [tokens, 4 x hidden], and its skip connections after the attention's and the
// feed-forward's output projections, in every layer). A Gelu's bias joins the product's when the
// product has none. A residual of another shape than the result (it broadcasts) is added after the
// product, as Add would. A Reshape right after the product (torch's Gemm exports: [B, S, K] ->
// [B * S, K] -> Gemm -> [B * S, n] -> [B, S, n], the target computed from Shape at run time)
// becomes a fifth input, its target: the activation commutes with it, and a residual of the
// target's shape is read in the product's shape; the op reshapes its result at the end (a bias-less
// activation only: a Gelu's bias broadcasts over the reshaped last axis). Runs after pack-matmul,
// whose products it takes.
import { OnnxDataType, type AttrValue, type NodeIR } from '../../onnx/index.js';
import { FUSED_DOMAIN } from '../../ops/mlx/fused.js';
import { fusedGeluKind } from './gelu.js';
import { type GraphView, fusedNode, isDefaultDomain } from './view.js';

/** The activation kind (as @mlx/sys names them) a node applies to its first input alone, else undefined. */
function kindOf(n: NodeIR): string | undefined {
  if (n.domain === FUSED_DOMAIN && n.opType === 'Gelu') return fusedGeluKind(n);
  if (!isDefaultDomain(n) || n.inputs.length !== 1) return undefined;
  return ({ Relu: 'relu', Sigmoid: 'sigmoid', Tanh: 'tanh' } as Record<string, string | undefined>)[n.opType];
}

export function matmulEpilogueRewrite(view: GraphView): void {
  for (const mm of view.graph.nodes) {
    if (view.isRemoved(mm) || mm.domain !== FUSED_DOMAIN || mm.opType !== 'MatMulPacked' || mm.attributes.has('activation')) continue;
    const nodes: NodeIR[] = [mm];
    let out = mm.outputs[0];
    let bias = mm.inputs[2] ?? '';
    let kind: string | undefined;
    // A Reshape (opset 5 on: its target an input) that alone reads the product.
    const rs = view.soleReader(out);
    const reshape =
      rs && !view.isRemoved(rs) && rs.opType === 'Reshape' && isDefaultDomain(rs) && rs.inputs[0] === out && rs.inputs[1] && rs.outputs[0]
        ? rs
        : undefined;
    if (reshape) {
      nodes.push(reshape);
      out = reshape.outputs[0];
    }
    const act = view.soleReader(out);
    const actKind =
      act && !view.isRemoved(act) && act.inputs[0] === out && act.outputs.length === 1 && act.outputs[0] ? kindOf(act) : undefined;
    if (act && actKind) {
      const extra = act.inputs[1] ?? '';
      // The Gelu's bias: a constant float32 vector of the product's columns, taken only where the product has none.
      const n = mm.attributes.get('n');
      const b = extra ? view.constant(extra) : undefined;
      const fits =
        !extra ||
        (!reshape && !bias && n?.type === 'int' && b?.dtype === OnnxDataType.FLOAT && b.dims.length === 1 && b.dims[0] === n.value);
      if (fits) {
        if (extra) bias = extra;
        kind = actKind;
        nodes.push(act);
        out = act.outputs[0];
      }
    }
    let residual = '';
    const add = view.soleReader(out);
    if (add && !view.isRemoved(add) && add.opType === 'Add' && isDefaultDomain(add) && add.inputs[0] !== add.inputs[1] && add.outputs[0]) {
      residual = view.other(add, out) ?? '';
      if (residual) {
        nodes.push(add);
        out = add.outputs[0];
      }
    }
    if (!kind && !residual) continue;
    const attrs: Record<string, AttrValue> = {
      ...Object.fromEntries(mm.attributes),
      activation: { type: 'string', value: kind ?? 'identity' },
    };
    if (reshape) attrs.allowzero = { type: 'int', value: reshape.attributes.get('allowzero')?.value === 1 ? 1 : 0 };
    const inputs = [mm.inputs[0], mm.inputs[1], bias, ...(residual || reshape ? [residual] : []), ...(reshape ? [reshape.inputs[1]] : [])];
    // A product without a bias keeps an empty third input before its residual (none after it
    // otherwise), and one without a residual an empty fourth before the Reshape's target.
    view.replace(nodes, fusedNode(view, 'MatMulPacked', mm, residual || bias || reshape ? inputs : inputs.slice(0, 2), [out], attrs));
  }
}
