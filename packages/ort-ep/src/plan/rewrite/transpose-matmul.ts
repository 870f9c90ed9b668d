// MatMul(x, W) and MatMulAdd(x, W, b) by a constant floating-point [K, N] matrix on a GPU ->
// mlx.fused::MatMulTransposed(x, Wᵀ [N, K] (, b)): the weight is stored transposed once, here, and
// multiplied as a transposed view. MLX's CUDA matrix product takes its matrix-vector kernel for a
// one-row product (a decode step) only when the matrix is read along K, that is when B is a
// transposed view of a row-major [N, K]; with a [K, N] weight every decode-step product went
// through cuBLASLt (on an H100, the 124.6M decoder decoded 221-227 tokens/s at context 1024 that
// way, 238-250 with this rewrite). Prefill products are cuBLASLt either way (a transposed operand
// is one of its flags). Only on GPU sessions (RewriteTarget.transposeWeights); runs after
// matmul-add, gemm and sibling-matmul, whose products (joined weights included) it takes. The
// [K, N] weight is dropped when nothing else reads it.
import * as mx from '@mlx/core';
import { OnnxDataType, type HostTensor, type NodeIR } from '../../onnx/index.js';
import { aRank, isWeightProduct } from './pack-matmul.js';
import { type GraphView, fusedNode } from './view.js';

const FLOATS = new Set<number>([OnnxDataType.FLOAT, OnnxDataType.FLOAT16, OnnxDataType.BFLOAT16]);

/** [K, N] -> [N, K] (float32 as Float32Array, float16 and bfloat16 as their bits), on the native library's threads. */
export function transposeMatrix(w: HostTensor): HostTensor {
  const [k, n] = w.dims;
  return { dtype: w.dtype, dims: [n, k], data: mx.transposeHost(w.data as Float32Array | Uint16Array, k, n) };
}

export function transposeMatmulRewrite(view: GraphView): void {
  if (!view.target.transposeWeights) return;
  const graph = view.graph;
  const done = new Map<string, string>();
  const products: NodeIR[] = [];
  for (const n of graph.nodes) {
    if (view.isRemoved(n) || !isWeightProduct(n)) continue;
    const wName = n.inputs[1];
    const w = view.constant(wName);
    if (!w || !FLOATS.has(w.dtype) || w.dims.length !== 2 || w.dims[0] < 1 || w.dims[1] < 1) continue;
    if (Array.isArray(w.data) || w.data.length !== w.dims[0] * w.dims[1]) continue;
    let t = done.get(wName);
    if (!t) {
      t = view.freshName(`${wName}/transposed`);
      graph.initializers.set(t, transposeMatrix(w));
      done.set(wName, t);
    }
    const inputs = [n.inputs[0], t, ...(n.opType === 'MatMulAdd' ? [n.inputs[2]] : [])];
    view.replace([n], fusedNode(view, 'MatMulTransposed', n, inputs, n.outputs, aRank(n)));
    products.push(n);
  }
  for (const w of done.keys()) if (graph.initializers.has(w) && view.readOnlyBy(w, products)) graph.initializers.delete(w);
}
