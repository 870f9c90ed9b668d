// MatMul(a, W) + bias, W a constant [K, N] matrix and bias a constant [N] vector (a Linear layer as
// exported without Gemm, on inputs of any rank) -> mlx.fused::MatMulAdd, which runs MLX's addmm:
// the bias goes into the GEMM as its C term instead of a second pass over the result.
import { OnnxDataType } from '../../onnx/index.js';
import { type GraphView, fusedNode, isDefaultDomain } from './view.js';

const GEMM_TYPES = new Set<number>([OnnxDataType.FLOAT, OnnxDataType.FLOAT16, OnnxDataType.BFLOAT16, OnnxDataType.DOUBLE]);

export function matmulAddRewrite(view: GraphView): void {
  for (const mm of view.graph.nodes) {
    if (view.isRemoved(mm) || mm.opType !== 'MatMul' || !isDefaultDomain(mm)) continue;
    const w = view.constant(mm.inputs[1]);
    if (!w || w.dims.length !== 2 || !GEMM_TYPES.has(w.dtype)) continue;
    const add = view.soleReader(mm.outputs[0]);
    if (!add || add.opType !== 'Add' || !isDefaultDomain(add) || view.isRemoved(add)) continue;
    const biasName = view.other(add, mm.outputs[0]);
    const bias = view.constant(biasName);
    if (!bias || bias.dtype !== w.dtype || bias.dims.length !== 1 || bias.dims[0] !== w.dims[1]) continue;
    view.replace([mm, add], fusedNode(view, 'MatMulAdd', mm, [mm.inputs[0], mm.inputs[1], biasName!], add.outputs));
  }
}
