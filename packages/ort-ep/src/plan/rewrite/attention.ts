// Attention as exporters spell it, to one mlx.fused::Attention node (MLX's fused
// scaled_dot_product_attention where it is faster; the same ops with the fused softmax elsewhere):
//
//   s = MatMul(q', kt')          q' = q | q * c | q / c   (the scale applied to Q or to Kᵀ first; c a
//                                constant, or a computed value: inputs 5 and 6 of the fused op)
//   s = s * c | s / c            (optional; at most one, after the product)
//   s = s + mask                 (optional, either order: padding, causal or bias masks as computed)
//   s = Where(cond, s, fill)     (optional; or Where(cond, fill, s); fill ≤ -1e30, a big negative)
//   p = Softmax(s, axis=-1)      (then Where(IsNaN(p), 0, p) as torch exports SDPA, and up to two
//                                 Casts to floating-point types)
//   y = MatMul(p, v)
//
// The Add and the Where may come in either order (at most one of each). Every intermediate must be
// read by the pattern alone. The fused op computes exactly this graph (src/ops/mlx/fused.ts): shapes
// that MLX's fused attention does not take run the same ops, so nothing here depends on shapes.
// A Where's fill must swamp any score (s + fill == fill in float32), so that it can become an
// additive mask.
import { OnnxDataType, type NodeIR } from '../../onnx/index.js';
import { type GraphView, floatAttr, fusedNode, isDefaultDomain } from './view.js';

/** How small a Where's fill must be to act as an additive -inf: s + fill rounds to fill for |s| < 1e22. */
const SWAMPING_FILL = -1e30;

/** A Cast of the probabilities that the fused op can apply (to a floating-point type). */
const FLOAT_CASTS = new Set<number>([OnnxDataType.FLOAT, OnnxDataType.FLOAT16, OnnxDataType.DOUBLE, OnnxDataType.BFLOAT16]);

const live = (view: GraphView, n: NodeIR | undefined, op: string): n is NodeIR =>
  n !== undefined && n.opType === op && isDefaultDomain(n) && !view.isRemoved(n);

/** The Mul or Div that makes `name`, read only by `reader`, with its two inputs. */
function scaleNode(view: GraphView, name: string, reader: NodeIR): NodeIR | undefined {
  if (view.soleReader(name) !== reader) return undefined;
  const n = view.made(name, 'Mul') ?? view.made(name, 'Div');
  return n && n.inputs.length === 2 && n.inputs[0] && n.inputs[1] ? n : undefined;
}

/** `name` as x * c or x / c by a scalar constant, read only by `reader`: x and the factor. */
function scaled(view: GraphView, name: string, reader: NodeIR): { x: string; factor: number; node: NodeIR } | undefined {
  const n = scaleNode(view, name, reader);
  if (!n) return undefined;
  if (n.opType === 'Div') {
    const d = view.floatScalar(n.inputs[1]);
    return d !== undefined && d !== 0 && Number.isFinite(d) ? { x: n.inputs[0], factor: 1 / d, node: n } : undefined;
  }
  for (const j of [0, 1]) {
    const c = view.floatScalar(n.inputs[1 - j]);
    if (c !== undefined && Number.isFinite(c)) return { x: n.inputs[j], factor: c, node: n };
  }
  return undefined;
}

/** Whether `name` is scores: read by `reader` alone and made by the product through scales, Adds and Wheres. */
function fromProduct(view: GraphView, name: string, reader: NodeIR, depth: number): boolean {
  if (depth < 0 || view.soleReader(name) !== reader) return false;
  const n = view.producer.get(name);
  if (!n || !isDefaultDomain(n) || view.isRemoved(n)) return false;
  if (n.opType === 'MatMul') return true;
  const pre = n.opType === 'Mul' || n.opType === 'Div' ? scaled(view, name, reader) : undefined;
  if (pre) return fromProduct(view, pre.x, n, depth - 1);
  if (n.opType === 'Where') return n.inputs.slice(1).some((i) => fromProduct(view, i, n, depth - 1));
  if (n.opType === 'Add') return n.inputs.some((i) => fromProduct(view, i, n, depth - 1));
  return false;
}

/** Where(IsNaN(p), 0, p) with p read by those two alone: its nodes and output. */
function nanGuard(view: GraphView, p: string): { nodes: NodeIR[]; out: string } | undefined {
  const rs = view.readersOf(p);
  if (rs.length !== 2 || !view.readOnlyBy(p, rs)) return undefined;
  const isnan = rs.find((r) => live(view, r, 'IsNaN'));
  const where = rs.find((r) => live(view, r, 'Where'));
  if (!isnan || !where || where.inputs[0] !== isnan.outputs[0] || where.inputs[2] !== p) return undefined;
  if (view.soleReader(isnan.outputs[0]) !== where || view.floatScalar(where.inputs[1]) !== 0) return undefined;
  return { nodes: [isnan, where], out: where.outputs[0] };
}

function match(view: GraphView, sm: NodeIR): boolean {
  const axis = sm.attributes.get('axis');
  if (axis?.type !== 'int' || axis.value !== -1) return false;
  // After the softmax: Casts to floating-point types (at most two: up to float32 and back), then the product with V.
  let pName = sm.outputs[0];
  // torch's SDPA export: Where(IsNaN(p), 0, p), so that rows with no visible key give zeros.
  const guard = nanGuard(view, pName);
  if (guard) pName = guard.out;
  let reader = view.soleReader(pName);
  const casts: NodeIR[] = [];
  for (
    let to = reader?.attributes.get('to');
    casts.length < 2 && live(view, reader, 'Cast') && to?.type === 'int' && FLOAT_CASTS.has(to.value);
  ) {
    casts.push(reader);
    pName = reader.outputs[0];
    reader = view.soleReader(pName);
    to = reader?.attributes.get('to');
  }
  if (!live(view, reader, 'MatMul') || reader.inputs[0] !== pName) return false;
  const pv = reader;
  // Before it: the masks (Add and Where, at most one each), an optional scale, the product.
  const nodes: NodeIR[] = [sm, pv];
  nodes.push(...casts);
  if (guard) nodes.push(...guard.nodes);
  let s = sm.inputs[0];
  let next: NodeIR = sm;
  let mask: string | undefined;
  let cond: string | undefined;
  let fill = 0;
  let keepIfTrue = true;
  let whereFirst = false;
  for (;;) {
    if (view.soleReader(s) !== next) return false;
    const add = view.made(s, 'Add');
    const where = view.made(s, 'Where');
    if (add && mask === undefined) {
      // The scores are the operand that leads back to the product through the pattern's nodes.
      const side = [0, 1].find((j) => fromProduct(view, add.inputs[j], add, 4));
      if (side === undefined) return false;
      s = add.inputs[side];
      mask = add.inputs[1 - side];
      nodes.push(add);
      next = add;
      continue;
    }
    if (where && cond === undefined) {
      const [c, x, y] = where.inputs;
      const fx = view.floatScalar(x);
      const fy = view.floatScalar(y);
      if (fy !== undefined && fy <= SWAMPING_FILL) {
        [cond, fill, keepIfTrue, s] = [c, fy, true, x];
      } else if (fx !== undefined && fx <= SWAMPING_FILL) {
        [cond, fill, keepIfTrue, s] = [c, fx, false, y];
      } else return false;
      // Walking backwards: a Where found after an Add ran before it.
      whereFirst = mask !== undefined;
      nodes.push(where);
      next = where;
      continue;
    }
    break;
  }
  let scale = 1;
  const post = view.made(s, 'MatMul') ? undefined : scaled(view, s, next);
  if (post) {
    scale *= post.factor;
    nodes.push(post.node);
    next = post.node;
    s = post.x;
  }
  if (view.soleReader(s) !== next) return false;
  const qk = view.made(s, 'MatMul');
  if (!qk) return false;
  nodes.push(qk);
  let [q, kt] = qk.inputs;
  // A computed factor on either side: its name and whether it divides (inputs 5 and 6, attributes q_div and k_div).
  const by: { name: string; div: boolean }[] = [
    { name: '', div: false },
    { name: '', div: false },
  ];
  for (const side of [0, 1]) {
    // A constant factor folds into the scale here. Any other (torch's SDPA export takes
    // sqrt(1 / sqrt(d)) from Q's shape) goes in as an input: the fused op folds it when it turns out
    // one value known on the host at run time, and otherwise applies the Mul or Div as written.
    const n = scaleNode(view, qk.inputs[side], qk);
    if (!n) continue;
    const pre = scaled(view, qk.inputs[side], qk);
    if (pre) scale *= pre.factor;
    else by[side] = { name: n.inputs[1], div: n.opType === 'Div' };
    nodes.push(n);
    if (side === 0) q = pre?.x ?? n.inputs[0];
    else kt = pre?.x ?? n.inputs[0];
  }
  if (!Number.isFinite(scale)) return false;
  const attrs = {
    scale: floatAttr(scale),
    fill: floatAttr(fill),
    keep_if_true: { type: 'int' as const, value: keepIfTrue ? 1 : 0 },
    where_first: { type: 'int' as const, value: whereFirst ? 1 : 0 },
    nan_to_zero: { type: 'int' as const, value: guard ? 1 : 0 },
    ...(by[0].div ? { q_div: { type: 'int' as const, value: 1 } } : {}),
    ...(by[1].div ? { k_div: { type: 'int' as const, value: 1 } } : {}),
    ...(casts.length
      ? { cast_to: { type: 'ints' as const, value: casts.map((c) => (c.attributes.get('to') as { value: number }).value) } }
      : {}),
  };
  const inputs = [q, kt, pv.inputs[1], mask ?? '', cond ?? ''];
  if (by[0].name || by[1].name) inputs.push(by[0].name, by[1].name);
  view.replace(nodes, fusedNode(view, 'Attention', sm, inputs, pv.outputs, attrs));
  return true;
}

export function attentionRewrite(view: GraphView): void {
  for (const n of view.graph.nodes) {
    if (live(view, n, 'Softmax')) match(view, n);
  }
}
