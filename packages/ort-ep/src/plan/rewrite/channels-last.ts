// The layout pass: MLX convolves channels-last ([N, ...spatial, C], weight [O, ...kernel, C]) and
// ONNX is channels-first, so a Conv as written moves its input, its weight and its result between
// the two on every run. This pass turns every Conv (and fused conv epilogue) with a constant
// float32 weight, but 2-D depthwise ones (the native channels-first depthwise kernel's), into
// mlx.fused::ConvChannelsLast, whose weight is packed once, here, into panels of 32 output
// channels, [ceil(O / 32), ...kernel, C, 32] (grouped: each group's own panels, in turn, over its
// C / g channels; a grouped 1x1 counts as spatial below) (a new initializer; the
// layout @mlx/sys's native channels-last convolution multiplies by), and whose input, residual and
// result stay channels-last between such convolutions: a value is kept channels-last when every
// node reading it is one of them (as the data or the residual) and it is not a graph output;
// elsewhere (a pool, a graph output, a reshape) the producing op hands back ONNX's layout. So a
// ResNet body runs channels-last from its first convolution to its last, with one move at each end;
// a MaxPool (without Indices) between such convs, the stem's, becomes MaxPoolChannelsLast (an
// AveragePool of such a conv's result AveragePoolChannelsLast, wherever its result goes), and a
// GlobalAveragePool of such a conv's result GlobalAveragePoolChannelsLast (the mean over the
// spatial axes of the channels-last data: no move back to ONNX's layout at ResNet's head).
// A value kept channels-last gets a new name ('<name>/nhwc') and loses its value info (its shape
// is no longer the one the model declares). Runs after conv-epilogue, whose fused convs it takes.
import * as mx from '@mlx/core';
import { OnnxDataType, heldFloat32s, undecodedBytes, type AttrValue, type HostTensor, type NodeIR } from '../../onnx/index.js';
import { FUSED_DOMAIN } from '../../ops/mlx/fused.js';
import { type GraphView, fusedNode, isDefaultDomain } from './view.js';

const intAttr = (value: number): AttrValue => ({ type: 'int', value });

/** Input positions of ConvChannelsLast (and of the Conv / fused Conv it replaces) that may read channels-last data. */
const DATA = 0;
const RESIDUAL = 3;

function isConv(n: NodeIR): boolean {
  return (n.opType === 'Conv' && isDefaultDomain(n)) || (n.opType === 'Conv' && n.domain === FUSED_DOMAIN);
}

/** Output channels per weight panel of the native channels-last convolution (@mlx/sys's conv_gemm). */
export const PANEL = 32;

/**
 * [O, C / g, ...k] -> [g * ceil(O / g / PANEL), ...k, C / g, PANEL] (each group's panels in turn,
 * zeros past its O / g channels), once: the layout the native convolution multiplies by (PANEL
 * output channels side by side for each input tap and channel of their group).
 */
function toPanels(w: HostTensor, group: number): HostTensor {
  const [o, c, ...k] = w.dims;
  const s = k.reduce((a, b) => a * b, 1);
  const panels = group * Math.ceil(o / group / PANEL);
  // Packed by the native library on its threads (the AVX2 build's panels hold their halves one
  // after another: mx.convPanelsSplit), from the file's bytes where the weight was never decoded.
  return {
    dtype: OnnxDataType.FLOAT,
    dims: [panels, ...k, c, PANEL],
    data: mx.convPackHost(undecodedBytes(w) ?? (w.data as Float32Array), o, c, s, group),
  };
}

function validWindow(n: NodeIR): boolean {
  const ints = (k: string, ok: (v: number) => boolean) => {
    const a = n.attributes.get(k);
    return !a || (a.type === 'ints' && a.value.every(ok));
  };
  const pad = n.attributes.get('auto_pad');
  const autoPad = !pad || (pad.type === 'string' && ['NOTSET', 'SAME_UPPER', 'SAME_LOWER', 'VALID'].includes(pad.value));
  return (
    autoPad &&
    ints('strides', (v) => v > 0) &&
    ints('dilations', (v) => v > 0) &&
    ints('kernel_shape', (v) => v > 0) &&
    ints('pads', (v) => v >= 0)
  );
}

/** A 1x1 kernel with unit strides and no padding (auto_pad pads nothing for it either). */
function isPointwise(n: NodeIR, w: HostTensor): boolean {
  const ints = (k: string) => {
    const a = n.attributes.get(k);
    return a?.type === 'ints' ? a.value : [];
  };
  return w.dims.slice(2).every((d) => d === 1) && ints('strides').every((s) => s === 1) && ints('pads').every((q) => q === 0);
}

/** The group attribute (default 1), or undefined when it is not a positive integer. */
function groupOf(n: NodeIR): number | undefined {
  const a = n.attributes.get('group');
  if (!a) return 1;
  return a.type === 'int' && Number.isInteger(a.value) && a.value > 0 ? a.value : undefined;
}

export function channelsLastRewrite(view: GraphView): void {
  const graph = view.graph;
  const convs = graph.nodes.filter((n) => {
    if (view.isRemoved(n) || !isConv(n) || n.outputs.length !== 1 || !n.outputs[0]) return false;
    // A node with attributes its op refuses stays as written, for the op's own error.
    if (!validWindow(n)) return false;
    const w = view.constant(n.inputs[1]);
    // Checked without decoding a weight that is only packed (from its file bytes).
    if (!w || w.dims.length < 3 || !heldFloat32s(w)) return false;
    const g = groupOf(n);
    // Grouped: each group's own panels. A 2-D depthwise conv (one input channel per group) keeps
    // the channels-first native depthwise kernel (a panel would hold one used channel of 32).
    return g !== undefined && w.dims[0] % g === 0 && (g === 1 || !(w.dims[1] === 1 && w.dims.length === 4));
  });
  // MaxPools (no Indices output) and AveragePools of a conv's result run channels-last too.
  const convSet = new Set(convs);
  const pools = graph.nodes.filter((n) => {
    if (view.isRemoved(n) || (n.opType !== 'MaxPool' && n.opType !== 'AveragePool') || !isDefaultDomain(n) || !validWindow(n)) return false;
    if (!n.outputs[0] || n.outputs.slice(1).some(Boolean)) return false;
    const k = n.attributes.get('kernel_shape');
    const producer = view.producer.get(n.inputs[0]);
    return k?.type === 'ints' && k.value.length > 0 && !!producer && convSet.has(producer);
  });
  const averages = graph.nodes.filter((n) => {
    if (view.isRemoved(n) || n.opType !== 'GlobalAveragePool' || !isDefaultDomain(n) || !n.outputs[0]) return false;
    const producer = view.producer.get(n.inputs[0]);
    return !!producer && convSet.has(producer);
  });
  const set = new Set<NodeIR>([...convs, ...pools, ...averages]);
  const isAverage = (n: NodeIR) => n.opType === 'GlobalAveragePool';
  const isPool = (n: NodeIR) => n.opType === 'MaxPool' || n.opType === 'AveragePool' || isAverage(n);
  // A value stays channels-last when only these nodes read it, each as data or residual.
  const last = new Set<string>();
  const settle = () => {
    last.clear();
    for (const n of set) {
      const out = n.outputs[0];
      const readers = view.readersOf(out);
      const ok =
        readers.length > 0 &&
        view.readOnlyBy(out, readers) &&
        readers.every(
          (r) =>
            set.has(r) &&
            r.inputs.every((name, i) => name !== out || i === DATA || (!isPool(r) && i === RESIDUAL && r.domain === FUSED_DOMAIN)),
        );
      // A global average's result ([N, C, 1, ...]) is always handed back in ONNX's layout.
      if (ok && !isAverage(n)) last.add(out);
    }
  };
  // A pool whose input goes back to ONNX's layout stays as written (until none is left).
  const dropPools = () => {
    let dropped = false;
    for (const n of [...set])
      if (isPool(n) && !last.has(n.inputs[0])) {
        set.delete(n);
        dropped = true;
      }
    return dropped;
  };
  // The convs that values kept channels-last link form groups. A group of 1x1 convolutions only
  // is left as written: each is one channels-first product already (no layout moves), and
  // channels-last would add moves at the group's ends. A group with a larger kernel keeps them all.
  settle();
  while (dropPools()) settle();
  const group = new Map<NodeIR, NodeIR>([...set].map((n) => [n, n]));
  const root = (n: NodeIR): NodeIR => {
    while (group.get(n) !== n) n = group.get(n)!;
    return n;
  };
  for (const out of last) {
    const from = root(view.producer.get(out)!);
    for (const r of view.readersOf(out)) group.set(root(r), from);
  }
  const spatial = new Set<NodeIR>();
  for (const n of set) if (!isPool(n) && (groupOf(n) !== 1 || !isPointwise(n, view.constant(n.inputs[1])!))) spatial.add(root(n));
  for (const n of [...set]) if (!spatial.has(root(n))) set.delete(n);
  settle();
  while (dropPools()) settle();
  // A 1x1 convolution whose data input is in ONNX's layout would move it channels-last only to
  // multiply (the channels-first product of ops/conv.ts reads it as it is): it leaves the set, and
  // a value only kept channels-last for it goes back (MobileNetV3's squeeze-excite projection,
  // whose residual is the stem's result), until no such convolution is left.
  const movesData = (n: NodeIR) =>
    !isPool(n) && groupOf(n) === 1 && isPointwise(n, view.constant(n.inputs[1])!) && !last.has(n.inputs[DATA]);
  for (let moved = [...set].filter(movesData); moved.length > 0; moved = [...set].filter(movesData)) {
    for (const n of moved) set.delete(n);
    settle();
    while (dropPools()) settle();
  }
  if (set.size === 0) return;
  const rename = (name: string) => (last.has(name) ? `${name}/nhwc` : name);
  const packed = new Map<string, string>();
  const weights = new Set<string>();
  for (const n of set) {
    if (isAverage(n)) {
      view.replace([n], fusedNode(view, 'GlobalAveragePoolChannelsLast', n, [rename(n.inputs[0])], [n.outputs[0]], {}));
      continue;
    }
    if (isPool(n)) {
      const attrs: Record<string, AttrValue> = Object.fromEntries(n.attributes);
      attrs.y_last = intAttr(last.has(n.outputs[0]) ? 1 : 0);
      // The panels' layout toPanels wrote (a graph written out and run elsewhere is read right).
      attrs.split_halves = intAttr(mx.convPanelsSplit() ? 1 : 0);
      const op = n.opType === 'MaxPool' ? 'MaxPoolChannelsLast' : 'AveragePoolChannelsLast';
      view.replace([n], fusedNode(view, op, n, [rename(n.inputs[0])], [rename(n.outputs[0])], attrs));
      continue;
    }
    const wName = n.inputs[1];
    const key = `${wName}\0${groupOf(n)}`;
    let p = packed.get(key);
    if (!p) {
      p = view.freshName(`${wName}/panels`);
      graph.initializers.set(p, toPanels(view.constant(wName)!, groupOf(n)!));
      packed.set(key, p);
      weights.add(wName);
    }
    const attrs: Record<string, AttrValue> = Object.fromEntries(n.attributes);
    attrs.group = intAttr(groupOf(n)!);
    attrs.out_channels = intAttr(view.constant(wName)!.dims[0]);
    attrs.x_last = intAttr(last.has(n.inputs[0]) ? 1 : 0);
    attrs.residual_last = intAttr(n.inputs[RESIDUAL] && last.has(n.inputs[RESIDUAL]) ? 1 : 0);
    attrs.y_last = intAttr(last.has(n.outputs[0]) ? 1 : 0);
    // The panels' layout toPanels wrote (a graph written out and run elsewhere is read right).
    attrs.split_halves = intAttr(mx.convPanelsSplit() ? 1 : 0);
    const inputs = [rename(n.inputs[0]), p, n.inputs[2] ?? '', n.inputs[RESIDUAL] ? rename(n.inputs[RESIDUAL]) : ''];
    view.replace([n], fusedNode(view, 'ConvChannelsLast', n, inputs, [rename(n.outputs[0])], attrs));
  }
  for (const name of last) graph.valueInfo.delete(name);
  // The ONNX-layout weights nothing else reads are dropped (constants: no feed overrides them).
  const convsKept = [...set].filter((n) => !isPool(n));
  for (const w of weights) if (graph.initializers.has(w) && view.readOnlyBy(w, convsKept)) graph.initializers.delete(w);
}
