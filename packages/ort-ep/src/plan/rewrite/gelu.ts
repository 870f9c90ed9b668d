// GELU as exporters spell it, to one mlx.fused::Gelu node (the fused CPU kernel; MLX's ops on a GPU):
//   erf form:  y = x * 0.5 * (1 + Erf(x / sqrt 2))       (also x * (1/sqrt 2), and 0.5 applied first)
//   tanh form: y = 0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))   (x^3 as Pow or Mul·Mul)
// The constants are floating point, so ONNX's type rules make x floating point too.
import type { NodeIR } from '../../onnx/index.js';
import { FUSED_DOMAIN } from '../../ops/mlx/fused.js';
import { type GraphView, fusedNode, isDefaultDomain, stringAttr } from './view.js';

/** The activation kind (as @mlx/sys names them) of an mlx.fused::Gelu this rewrite made: gelu or gelu_tanh; else undefined. */
export function fusedGeluKind(n: NodeIR): 'gelu' | 'gelu_tanh' | undefined {
  if (n.domain !== FUSED_DOMAIN || n.opType !== 'Gelu') return undefined;
  const a = n.attributes.get('approximate');
  if (a === undefined || (a.type === 'string' && a.value === 'none')) return 'gelu';
  return a.type === 'string' && a.value === 'tanh' ? 'gelu_tanh' : undefined;
}

/** From `t` = 1 + f(x), the node computing 0.5 * x * t in either association, with its pattern nodes. */
function halfXTimes(view: GraphView, x: string, t: string): { out: NodeIR; nodes: NodeIR[] } | undefined {
  const m = view.soleReader(t);
  if (!m || m.opType !== 'Mul' || view.isRemoved(m)) return undefined;
  const o = view.other(m, t);
  if (o === x) {
    // (x * t) * 0.5
    const h = view.soleReader(m.outputs[0]);
    if (h?.opType === 'Mul' && !view.isRemoved(h) && view.isScalar(view.other(h, m.outputs[0]), 0.5)) return { out: h, nodes: [m, h] };
    return undefined;
  }
  // (x * 0.5) * t
  const h = view.made(o, 'Mul');
  if (h && view.soleReader(h.outputs[0]) === m && view.other(h, x) !== undefined && view.isScalar(view.other(h, x), 0.5))
    return { out: m, nodes: [h, m] };
  return undefined;
}

/** `a` = 1 + `f` (Add with the constant 1 in either order), f's only reader. */
function onePlus(view: GraphView, f: string): NodeIR | undefined {
  const a = view.soleReader(f);
  return a?.opType === 'Add' && !view.isRemoved(a) && view.isScalar(view.other(a, f), 1) ? a : undefined;
}

function erfForm(view: GraphView, erf: NodeIR): boolean {
  const scaled = erf.inputs[0];
  const d = view.made(scaled, 'Div') ?? view.made(scaled, 'Mul');
  if (!d || view.soleReader(scaled) !== erf) return false;
  let x: string | undefined;
  if (d.opType === 'Div') x = view.isScalar(d.inputs[1], Math.SQRT2) ? d.inputs[0] : undefined;
  else if (view.isScalar(d.inputs[1], Math.SQRT1_2)) x = d.inputs[0];
  else if (view.isScalar(d.inputs[0], Math.SQRT1_2)) x = d.inputs[1];
  if (!x) return false;
  const a = onePlus(view, erf.outputs[0]);
  if (!a) return false;
  const tail = halfXTimes(view, x, a.outputs[0]);
  if (!tail) return false;
  view.replace([d, erf, a, ...tail.nodes], fusedNode(view, 'Gelu', erf, [x], [tail.out.outputs[0]], { approximate: stringAttr('none') }));
  return true;
}

/** x^3 as Pow(x, 3) or (x * x) * x; returns x and the nodes. */
function cube(view: GraphView, name: string): { x: string; nodes: NodeIR[] } | undefined {
  const p = view.made(name, 'Pow');
  if (p && view.isScalar(p.inputs[1], 3)) return { x: p.inputs[0], nodes: [p] };
  const m = view.made(name, 'Mul');
  if (!m) return undefined;
  for (const [sq, x] of [
    [m.inputs[0], m.inputs[1]],
    [m.inputs[1], m.inputs[0]],
  ]) {
    const s = view.made(sq, 'Mul');
    if (s && s.inputs[0] === x && s.inputs[1] === x && view.soleReader(sq) === m) return { x, nodes: [s, m] };
  }
  return undefined;
}

function tanhForm(view: GraphView, tanh: NodeIR): boolean {
  const arg = tanh.inputs[0];
  const k = view.made(arg, 'Mul');
  if (!k || view.soleReader(arg) !== tanh) return false;
  const kConst = view.isScalar(k.inputs[1], Math.sqrt(2 / Math.PI), 1e-5)
    ? 1
    : view.isScalar(k.inputs[0], Math.sqrt(2 / Math.PI), 1e-5)
      ? 0
      : -1;
  if (kConst < 0) return false;
  const sum = view.made(k.inputs[1 - kConst], 'Add');
  if (!sum || view.soleReader(sum.outputs[0]) !== k) return false;
  // x + 0.044715 * x^3, either order
  for (const [x, scaledCube] of [
    [sum.inputs[0], sum.inputs[1]],
    [sum.inputs[1], sum.inputs[0]],
  ]) {
    const c = view.made(scaledCube, 'Mul');
    if (!c || view.soleReader(scaledCube) !== sum) continue;
    const cc = view.isScalar(c.inputs[1], 0.044715, 1e-5) ? 1 : view.isScalar(c.inputs[0], 0.044715, 1e-5) ? 0 : -1;
    if (cc < 0) continue;
    const cb = cube(view, c.inputs[1 - cc]);
    if (!cb || cb.x !== x || view.soleReader(c.inputs[1 - cc]) !== c) continue;
    const a = onePlus(view, tanh.outputs[0]);
    if (!a) return false;
    const tail = halfXTimes(view, x, a.outputs[0]);
    if (!tail) return false;
    view.replace(
      [...cb.nodes, c, sum, k, tanh, a, ...tail.nodes],
      fusedNode(view, 'Gelu', tanh, [x], [tail.out.outputs[0]], { approximate: stringAttr('tanh') }),
    );
    return true;
  }
  return false;
}

export function geluRewrite(view: GraphView): void {
  for (const n of view.graph.nodes) {
    if (view.isRemoved(n)) continue;
    if (!isDefaultDomain(n)) continue;
    if (n.opType === 'Erf') erfForm(view, n);
    else if (n.opType === 'Tanh') tanhForm(view, n);
  }
}
