// GroupQueryAttention fed the three parts of one joined projection (sibling-matmul's SplitLast of
// the Q, K and V products, read by nothing else) takes the joined product as its packed QKV input,
// key and value empty: the contrib op's own packed form, [B, S, (N + 2 Nkv) * H]. The split goes,
// and on the CPU the decode step's kernel reads each part at its columns. Runs after
// sibling-matmul, whose splits it takes.
import type { NodeIR } from '../../onnx/index.js';
import type { GraphView } from './view.js';

const MS_DOMAIN = 'com.microsoft';

/** The int attribute `name` of `n`, or `fallback`. */
function intAttr(n: NodeIR, name: string, fallback: number): number {
  const a = n.attributes.get(name);
  return a?.type === 'int' ? a.value : fallback;
}

export function packedQkvRewrite(view: GraphView): void {
  for (const gqa of view.graph.nodes) {
    if (gqa.domain !== MS_DOMAIN || gqa.opType !== 'GroupQueryAttention' || view.isRemoved(gqa)) continue;
    const [q, k, v] = gqa.inputs;
    const split = view.madeFused(q, 'SplitLast');
    if (!split || split.outputs.length !== 3 || split.outputs[0] !== q || split.outputs[1] !== k || split.outputs[2] !== v) continue;
    const heads = intAttr(gqa, 'num_heads', 0);
    const kvHeads = intAttr(gqa, 'kv_num_heads', 0);
    const sizes = split.attributes.get('sizes');
    if (heads <= 0 || kvHeads <= 0 || sizes?.type !== 'ints' || sizes.value.length !== 3) continue;
    const [sq, sk, sv] = sizes.value;
    // The parts must be Q, K and V of one head size H: N * H, Nkv * H, Nkv * H.
    if (sq % heads !== 0 || sk !== sv || sk !== (sq / heads) * kvHeads) continue;
    if (![q, k, v].every((o) => view.readOnlyBy(o, [gqa]))) continue;
    const packed: NodeIR = { ...gqa, inputs: [split.inputs[0], '', '', ...gqa.inputs.slice(3)] };
    view.replace([split, gqa], packed);
  }
}
