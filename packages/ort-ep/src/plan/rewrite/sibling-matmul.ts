// Sibling projections: several MatMuls of one activation by constant weights of the same K (a
// transformer's separate Q, K and V projections, a gated MLP's gate and up projections) become
// one product by the weights concatenated along N, and a split of its last axis:
//
//   y_i = MatMul(a, W_i)               -> y = MatMul(a, [W_1 | W_2 | ...]);  y_1, y_2, ... = y[..., N_i]
//   y_i = MatMulAdd(a, W_i, b_i)       -> the same with [b_1 | b_2 | ...] (after the matmul-add rewrite)
//   y_i = MatMulNBits(a, B_i, s_i, ..) -> one MatMulNBits of N = sum N_i (every N-major input joined)
//
// One wider GEMM instead of several: fewer kernel launches (on a GPU each op costs more than a
// decoding step's small GEMMs do), a better-shaped product on the CPU, and one read of `a`.
// The split's parts are views of the product. Each output element is the same dot product as
// before (the GEMM may block K differently, so the sums can round differently in the last bits).
// Weights are joined on the host once, at create(); the originals are dropped when nothing else
// reads them, so the weights are not held twice.
import { type HostTensor, type NodeIR, OnnxDataType } from '../../onnx/index.js';
import type { AttrValue } from '../../onnx/index.js';
import { FUSED_DOMAIN } from '../../ops/mlx/fused.js';
import { aRank } from './pack-matmul.js';
import { type GraphView, fusedNode, isDefaultDomain } from './view.js';

const GEMM_TYPES = new Set<number>([OnnxDataType.FLOAT, OnnxDataType.FLOAT16, OnnxDataType.BFLOAT16, OnnxDataType.DOUBLE]);

type Kind = 'matmul' | 'matmul-add' | 'nbits';

interface Member {
  node: NodeIR;
  kind: Kind;
  /** The group key: siblings join only with members of the same key. */
  key: string;
  /** Output features. */
  n: number;
}

const intsAttr = (value: number[]): AttrValue => ({ type: 'ints', value });

function nbitsAttrs(node: NodeIR): Record<string, number> | undefined {
  const out: Record<string, number> = {};
  for (const [name, a] of node.attributes) {
    if (a.type !== 'int') return undefined;
    out[name] = a.value;
  }
  return out;
}

/** What kind of sibling `node` is, reading `a` as its first input, or undefined. */
function member(view: GraphView, node: NodeIR, a: string): Member | undefined {
  if (view.isRemoved(node) || node.inputs[0] !== a || node.outputs.length !== 1 || !node.outputs[0]) return undefined;
  const isMatMul = node.opType === 'MatMul' && isDefaultDomain(node) && node.inputs.length === 2;
  const isMatMulAdd = node.opType === 'MatMulAdd' && node.domain === FUSED_DOMAIN;
  if (isMatMul || isMatMulAdd) {
    if (node.inputs[1] === a) return undefined;
    const w = view.constant(node.inputs[1]);
    if (w?.dims.length !== 2 || !GEMM_TYPES.has(w.dtype) || w.dims[1] === 0) return undefined;
    if (isMatMulAdd) {
      const b = view.constant(node.inputs[2]);
      if (!b || b.dtype !== w.dtype || b.dims.length !== 1 || b.dims[0] !== w.dims[1]) return undefined;
    }
    const kind: Kind = isMatMul ? 'matmul' : 'matmul-add';
    // A rewritten Gemm's rank check (a_rank) joins only with products that check the same.
    const rank = node.attributes.get('a_rank');
    return { node, kind, key: `${kind}:${w.dtype}:${w.dims[0]}:${rank?.type === 'int' ? rank.value : 0}`, n: w.dims[1] };
  }
  if (node.opType === 'MatMulNBits' && node.domain === 'com.microsoft') {
    const attrs = nbitsAttrs(node);
    if (!attrs || attrs.N === undefined || attrs.K === undefined || attrs.N <= 0) return undefined;
    // g_idx (input 4) reorders K per weight: not joinable. Every other input present is constant.
    if (node.inputs[4] || node.inputs.length > 6) return undefined;
    const present: number[] = [];
    for (let i = 1; i < node.inputs.length; i++) {
      if (!node.inputs[i]) continue;
      if (node.inputs[i] === a || !view.constant(node.inputs[i])) return undefined;
      present.push(i);
    }
    if (!present.includes(1) || !present.includes(2)) return undefined;
    const { N, ...rest } = attrs;
    const types = present.map((i) => view.constant(node.inputs[i])!.dtype);
    const key = `nbits:${JSON.stringify(Object.entries(rest).sort())}:${present.join(',')}:${types.join(',')}`;
    return { node, kind: 'nbits', key, n: N };
  }
  return undefined;
}

/** Joins N-major constants: the data of each, in order, with dims[axis] summed (axis 0 or 1 of a 2-D matrix). */
function join(parts: HostTensor[], axis: 0 | 1): HostTensor {
  const first = parts[0];
  if (axis === 0 || first.dims.length === 1) {
    const total = parts.reduce((s, p) => s + p.data.length, 0);
    const Ctor = first.data.constructor as new (n: number) => HostTensor['data'];
    const data = new Ctor(total);
    let at = 0;
    for (const p of parts) {
      (data as unknown as { set(a: ArrayLike<unknown>, o: number): void }).set(p.data as ArrayLike<unknown>, at);
      at += p.data.length;
    }
    const dims = [...first.dims];
    dims[0] = parts.reduce((s, p) => s + p.dims[0], 0);
    return { dtype: first.dtype, dims, data };
  }
  // [K, N_i] side by side: row k of the result is row k of each part in turn.
  const K = first.dims[0];
  const N = parts.reduce((s, p) => s + p.dims[1], 0);
  const Ctor = first.data.constructor as new (n: number) => HostTensor['data'];
  const data = new Ctor(K * N) as unknown as { set(a: ArrayLike<unknown>, o: number): void };
  for (let k = 0; k < K; k++) {
    let col = 0;
    for (const p of parts) {
      const n = p.dims[1];
      const src = p.data as unknown as { subarray(b: number, e: number): ArrayLike<unknown> };
      data.set(src.subarray(k * n, (k + 1) * n), k * N + col);
      col += n;
    }
  }
  return { dtype: first.dtype, dims: [K, N], data: data as unknown as HostTensor['data'] };
}

export function siblingMatmulRewrite(view: GraphView): void {
  const graph = view.graph;
  const order = new Map(graph.nodes.map((n, i) => [n, i]));
  const seen = new Set<string>();
  const joinedInputs: string[] = [];
  const groups: Member[][] = [];
  for (const n of graph.nodes) {
    const a = n.inputs[0];
    if (!a || seen.has(a)) continue;
    seen.add(a);
    const byKey = new Map<string, Member[]>();
    for (const r of view.readersOf(a)) {
      const m = member(view, r, a);
      if (m) (byKey.get(m.key) ?? byKey.set(m.key, []).get(m.key)!).push(m);
    }
    for (const all of byKey.values()) {
      // A weight joins only when it is an initializer that its own MatMul alone reads (no weight
      // held twice); biases, scales and zero points may be shared or aliased (they are small).
      const g = all.filter((m) => graph.initializers.has(m.node.inputs[1]) && view.readOnlyBy(m.node.inputs[1], [m.node]));
      if (g.length < 2) continue;
      g.sort((x, y) => order.get(x.node)! - order.get(y.node)!);
      groups.push(g);
    }
  }
  for (const g of groups) {
    const nodes = g.map((m) => m.node);
    const first = nodes[0];
    const sizes = g.map((m) => m.n);
    const joinedOut = `${first.outputs[0]}/joined`;
    const inputs: string[] = [first.inputs[0]];
    let product: NodeIR;
    if (g[0].kind === 'nbits') {
      for (let i = 1; i < first.inputs.length; i++) {
        if (!first.inputs[i]) {
          inputs.push('');
          continue;
        }
        const name = view.freshName(`${first.inputs[i]}/joined`);
        graph.initializers.set(
          name,
          join(
            g.map((m) => view.constant(m.node.inputs[i])!),
            0,
          ),
        );
        inputs.push(name);
      }
      const attributes = new Map(first.attributes);
      attributes.set('N', { type: 'int', value: sizes.reduce((s, x) => s + x, 0) });
      product = {
        name: view.name('MatMulNBits', first),
        opType: 'MatMulNBits',
        domain: 'com.microsoft',
        inputs,
        outputs: [joinedOut],
        attributes,
      };
    } else {
      const w = view.freshName(`${first.inputs[1]}/joined`);
      graph.initializers.set(
        w,
        join(
          g.map((m) => view.constant(m.node.inputs[1])!),
          1,
        ),
      );
      inputs.push(w);
      if (g[0].kind === 'matmul-add') {
        const b = view.freshName(`${first.inputs[2]}/joined`);
        graph.initializers.set(
          b,
          join(
            g.map((m) => view.constant(m.node.inputs[2])!),
            0,
          ),
        );
        inputs.push(b);
        product = fusedNode(view, 'MatMulAdd', first, inputs, [joinedOut], aRank(first));
      } else {
        product = { name: view.name('MatMul', first), opType: 'MatMul', domain: '', inputs, outputs: [joinedOut], attributes: new Map() };
      }
    }
    const split = fusedNode(
      view,
      'SplitLast',
      first,
      [joinedOut],
      g.map((m) => m.node.outputs[0]),
      { sizes: intsAttr(sizes) },
    );
    // At the first sibling: its input is ready there, and later siblings' readers come after it.
    view.replaceMany(nodes, [product, split], 'first');
    for (const m of g) for (const c of m.node.inputs.slice(1)) if (c && view.readOnlyBy(c, nodes)) joinedInputs.push(c);
  }
  for (const c of joinedInputs) graph.initializers.delete(c);
}
