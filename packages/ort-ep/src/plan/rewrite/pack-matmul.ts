// MatMul(x, W) and MatMulAdd(x, W, b) by a constant float32 [K, N] matrix -> mlx.fused::MatMulPacked,
// whose weight is packed once, here, into panels of 32 output columns, [ceil(N / 32), K, 32] (a new
// initializer; the layout @mlx/sys's dense_gemm multiplies by): the product then reads each panel
// as one contiguous run at every row count (a decode step's one row as a prefill's hundreds), and no
// longer hands OpenBLAS a weight it packs again on every call. Only where that kernel runs: a CPU
// session on a CPU with AVX-512 or AVX2+FMA (RewriteTarget.packDense); elsewhere the graph keeps MLX's matmul.
// Runs after matmul-add, gemm and sibling-matmul, whose products (joined weights included) it takes.
// The [K, N] weight is dropped when nothing else reads it (a tied embedding read by a Gather keeps it).
import * as mx from '@mlx/core';
import { OnnxDataType, heldFloat32s, undecodedBytes, type AttrValue, type HostTensor, type NodeIR } from '../../onnx/index.js';
import { FUSED_DOMAIN } from '../../ops/mlx/fused.js';
import { type GraphView, fusedNode, isDefaultDomain } from './view.js';

/** Output columns per weight panel of @mlx/sys's dense_gemm. */
export const DENSE_PANEL = 32;

/** [K, N] -> [ceil(N / 32), K, 32], zeros past N (packed by the native library on its threads: a BERT-base's 85M floats in tens of milliseconds, where a JavaScript loop took ~180). */
export function toDensePanels(w: HostTensor): HostTensor {
  const [k, n] = w.dims;
  return {
    dtype: OnnxDataType.FLOAT,
    dims: [Math.ceil(n / DENSE_PANEL), k, DENSE_PANEL],
    // A weight never read on the host is packed from its file bytes, with no decoded copy.
    data: mx.packDensePanels(undecodedBytes(w) ?? (w.data as Float32Array), k, n),
  };
}

/** A Gemm's rank check on A (MatMulAdd's a_rank), kept by the node that replaces it. */
export function aRank(n: NodeIR): Record<string, AttrValue> {
  const r = n.attributes.get('a_rank');
  return r ? { a_rank: r } : {};
}

/** A MatMul, or a fused MatMulAdd: the products whose constant weight pack-matmul and transpose-matmul lay out. */
export function isWeightProduct(n: NodeIR): boolean {
  return (n.opType === 'MatMul' && isDefaultDomain(n)) || (n.opType === 'MatMulAdd' && n.domain === FUSED_DOMAIN);
}

export function packMatmulRewrite(view: GraphView): void {
  if (!view.target.packDense) return;
  const graph = view.graph;
  const packed = new Map<string, string>();
  const products: NodeIR[] = [];
  for (const n of graph.nodes) {
    if (view.isRemoved(n) || !isWeightProduct(n)) continue;
    const wName = n.inputs[1];
    const w = view.constant(wName);
    // The weight as a [K, N] float32 matrix of at least one column and row; a MatMulAdd's bias a float32 [N] vector.
    if (!w || w.dtype !== OnnxDataType.FLOAT || w.dims.length !== 2 || w.dims[0] < 1 || w.dims[1] < 1) continue;
    if (heldFloat32s(w) !== w.dims[0] * w.dims[1]) continue;
    const bias = n.opType === 'MatMulAdd' ? view.constant(n.inputs[2]) : undefined;
    if (n.opType === 'MatMulAdd' && (!bias || bias.dtype !== OnnxDataType.FLOAT || bias.dims.length !== 1 || bias.dims[0] !== w.dims[1]))
      continue;
    let p = packed.get(wName);
    if (!p) {
      p = view.freshName(`${wName}/dense_panels`);
      graph.initializers.set(p, toDensePanels(w));
      packed.set(wName, p);
    }
    // The panels' layout this process packed (a graph written out and run elsewhere is read right).
    const attrs: Record<string, AttrValue> = {
      n: { type: 'int', value: w.dims[1] },
      ...aRank(n),
      split_halves: { type: 'int', value: mx.convPanelsSplit() ? 1 : 0 },
    };
    const inputs = [n.inputs[0], p, ...(bias ? [n.inputs[2]] : [])];
    view.replace([n], fusedNode(view, 'MatMulPacked', n, inputs, n.outputs, attrs));
    products.push(n);
  }
  // The [K, N] weights nothing else reads are dropped (constants: no feed overrides them).
  for (const w of packed.keys()) if (graph.initializers.has(w) && view.readOnlyBy(w, products)) graph.initializers.delete(w);
}
