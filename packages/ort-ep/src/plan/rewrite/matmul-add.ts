// MatMul(a, W) + bias, W a constant [K, N] matrix and bias a constant [N] vector (a Linear layer as
// exported without Gemm, on inputs of any rank) -> mlx.fused::MatMulAdd, which runs MLX's addmm:
// the bias goes into the GEMM as its C term instead of a second pass over the result. A Gemm by a
// constant float32 B with a constant bias row at unit alpha and beta (a classifier head, or a
// Linear layer exported as Reshape -> Gemm, GPT-2's) becomes one too, B transposed once here when
// transB says so (no transposed view of it on every run). Where A is not known to be 2-D (a
// Flatten's result, or one declared 2-D), the node keeps Gemm's rank check (attribute a_rank 2).
import { type AttrValue, OnnxDataType, heldFloat32s, type NodeIR } from '../../onnx/index.js';
import { transposeMatrix } from './transpose-matmul.js';
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

/** Whether `name` is known 2-D: a Flatten's result or a value declared with rank 2. */
function isMatrix(view: GraphView, name: string): boolean {
  if (view.made(name, 'Flatten')) return true;
  // An elementwise FakeQuantize (a QDQ model's Flatten -> Q -> DQ) keeps its input's shape.
  const fq = view.madeFused(name, 'FakeQuantize');
  if (fq) return isMatrix(view, fq.inputs[0]);
  const t = (view.graph.valueInfo.get(name) ?? view.graph.inputs.find((i) => i.name === name))?.type;
  return t?.kind === 'tensor' && t.shape?.length === 2;
}

function unitFloat(n: NodeIR, k: string): boolean {
  const a = n.attributes.get(k);
  return !a || (a.type === 'float' && a.value === 1);
}

function intIs(n: NodeIR, k: string, want: number): boolean {
  const a = n.attributes.get(k);
  return a ? a.type === 'int' && a.value === want : want === 0;
}

export function gemmRewrite(view: GraphView): void {
  const graph = view.graph;
  const done = new Map<string, string>();
  const rewritten: NodeIR[] = [];
  for (const g of graph.nodes) {
    if (view.isRemoved(g) || g.opType !== 'Gemm' || !isDefaultDomain(g) || g.outputs.length !== 1 || !g.outputs[0]) continue;
    if (!unitFloat(g, 'alpha') || !unitFloat(g, 'beta') || !intIs(g, 'transA', 0)) continue;
    const transB = intIs(g, 'transB', 1);
    if (!transB && !intIs(g, 'transB', 0)) continue;
    const b = view.constant(g.inputs[1]);
    // Checked without decoding B: a B that is only packed goes from its file bytes.
    if (!b || b.dims.length !== 2 || !heldFloat32s(b)) continue;
    const n = transB ? b.dims[0] : b.dims[1];
    const c = view.constant(g.inputs[2]);
    if (!c || c.dtype !== OnnxDataType.FLOAT || c.data.length !== n || !(c.dims.length === 1 || (c.dims.length === 2 && c.dims[0] === 1)))
      continue;
    let w = g.inputs[1];
    if (transB) {
      let t = done.get(w);
      if (!t) {
        t = view.freshName(`${w}/t`);
        graph.initializers.set(t, transposeMatrix(b));
        done.set(w, t);
      }
      w = t;
    }
    let bias = g.inputs[2];
    if (c.dims.length === 2) {
      const r = view.freshName(`${bias}/row`);
      graph.initializers.set(r, { ...c, dims: [n] });
      bias = r;
    }
    const attrs: Record<string, AttrValue> = isMatrix(view, g.inputs[0]) ? {} : { a_rank: { type: 'int', value: 2 } };
    view.replace([g], fusedNode(view, 'MatMulAdd', g, [g.inputs[0], w, bias], g.outputs, attrs));
    rewritten.push(g);
  }
  // A B that only rewritten Gemms read is held once, transposed (constants: no feed overrides them).
  for (const b of done.keys()) if (view.readOnlyBy(b, rewritten)) graph.initializers.delete(b);
}
