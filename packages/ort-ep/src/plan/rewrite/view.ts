// What the rewrites ask of a graph: who produces and who reads each value, which values are known
// constants (initializers that no feed can override, Constant nodes), and the bookkeeping of one
// pass (nodes matched by a rewrite are removed; its new node takes the place of the last one).
import { FUSED_DOMAIN } from '../../ops/mlx/fused.js';
import { OnnxDataType, outerReferences, type AttrValue, type GraphIR, type HostTensor, type NodeIR } from '../../onnx/index.js';

const FLOAT_TYPES = new Set<number>([OnnxDataType.FLOAT, OnnxDataType.FLOAT16, OnnxDataType.DOUBLE, OnnxDataType.BFLOAT16]);

/** What the session runs on, as far as a rewrite needs to know (rewriteGraph's `target`). */
export interface RewriteTarget {
  /** @mlx/sys's packed-weight product runs natively: a CPU session on a CPU with AVX-512 or AVX2+FMA. */
  packDense?: boolean;
  /** Constant matrices of products are stored transposed (MLX's CUDA matrix-vector kernel reads them so): a GPU session. */
  transposeWeights?: boolean;
}

export class GraphView {
  readonly producer = new Map<string, NodeIR>();
  private readonly readers = new Map<string, NodeIR[]>();
  /** Values read from outside the node list: graph outputs and names subgraphs reach into. */
  private readonly pinned = new Set<string>();
  private readonly removed = new Set<NodeIR>();
  private readonly replacement = new Map<NodeIR, NodeIR[]>();
  private fresh = 0;
  /** Each node's place in graph.nodes, made on the pass's first replacement (the list changes only at commit). */
  private order: Map<NodeIR, number> | undefined;

  constructor(
    readonly graph: GraphIR,
    readonly target: RewriteTarget = {},
    /** Names used anywhere in the model (subgraphs and enclosing scopes too), which freshName avoids and extends. */
    private readonly taken?: Set<string>,
  ) {
    for (const n of graph.nodes) {
      for (const o of n.outputs) if (o) this.producer.set(o, n);
      for (const i of n.inputs) if (i) (this.readers.get(i) ?? this.readers.set(i, []).get(i)!).push(n);
      for (const a of n.attributes.values()) {
        const gs = a.type === 'graph' ? [a.value] : a.type === 'graphs' ? a.value : [];
        for (const g of gs) for (const name of outerReferences(g)) this.pinned.add(name);
      }
    }
    for (const o of graph.outputs) this.pinned.add(o.name);
  }

  /** The one node that reads `name`, when exactly one node reads it and nothing else can see it. */
  soleReader(name: string): NodeIR | undefined {
    const r = this.readers.get(name);
    return r?.length === 1 && !this.pinned.has(name) ? r[0] : undefined;
  }

  /** The nodes reading `name`. */
  readersOf(name: string): readonly NodeIR[] {
    return (this.readers.get(name) ?? []).filter((n) => !this.removed.has(n));
  }

  /** Whether every reader of `name` is among `nodes` and nothing outside the node list reads it. */
  readOnlyBy(name: string, nodes: readonly NodeIR[]): boolean {
    return !this.pinned.has(name) && (this.readers.get(name) ?? []).every((n) => nodes.includes(n));
  }

  /** The node producing `name` if it has op type `op` (in the default domain) and is still in the graph. */
  made(name: string | undefined, op: string): NodeIR | undefined {
    const n = name ? this.producer.get(name) : undefined;
    return n && n.opType === op && isDefaultDomain(n) && !this.removed.has(n) ? n : undefined;
  }

  /** The node producing `name` if it is the rewrites' own mlx.fused::`op` and is still in the graph. */
  madeFused(name: string | undefined, op: string): NodeIR | undefined {
    const n = name ? this.producer.get(name) : undefined;
    return n && n.opType === op && n.domain === FUSED_DOMAIN && !this.removed.has(n) ? n : undefined;
  }

  /** A constant tensor: an initializer no feed overrides, a Constant node's value, or an Identity of one. */
  constant(name: string | undefined): HostTensor | undefined {
    if (!name) return undefined;
    const init = this.graph.initializers.get(name);
    if (init) return this.graph.inputsWithDefaults.has(name) ? undefined : init;
    // Exporters alias equal initializers through Identity nodes.
    const id = this.made(name, 'Identity');
    if (id) return this.constant(id.inputs[0]);
    const c = this.made(name, 'Constant');
    if (!c) return undefined;
    const value = c.attributes.get('value');
    if (value?.type === 'tensor') return value.value;
    const f = c.attributes.get('value_float');
    if (f?.type === 'float') return { dtype: OnnxDataType.FLOAT, dims: [], data: Float32Array.of(f.value) };
    return undefined;
  }

  /** The value of a one-element floating-point constant. */
  floatScalar(name: string | undefined): number | undefined {
    const t = this.constant(name);
    if (!t || !FLOAT_TYPES.has(t.dtype) || t.data.length !== 1 || t.dtype === OnnxDataType.FLOAT16 || t.dtype === OnnxDataType.BFLOAT16)
      return undefined;
    return Number(t.data[0]);
  }

  /** Whether `name` is a floating-point constant equal to `want` (to float32 rounding). */
  isScalar(name: string | undefined, want: number, rtol = 1e-6): boolean {
    const v = this.floatScalar(name);
    return v !== undefined && Math.abs(v - want) <= rtol * Math.abs(want) + 1e-12;
  }

  /** Of a binary node's two inputs, the one that is not `known` (undefined if neither is). */
  other(node: NodeIR, known: string): string | undefined {
    if (node.inputs[0] === known) return node.inputs[1];
    if (node.inputs[1] === known) return node.inputs[0];
    return undefined;
  }

  isRemoved(n: NodeIR): boolean {
    return this.removed.has(n);
  }

  /** Replaces `nodes` (a matched pattern; its last node in graph order produces the result) by `node`. */
  replace(nodes: readonly NodeIR[], node: NodeIR): void {
    this.replaceMany(nodes, [node]);
  }

  /**
   * As replace, with several new nodes (in order), in place of the last matched node, or of the
   * first (`at: 'first'`: when the new nodes' inputs are ready there and the matched nodes' readers
   * may come before the last of them).
   */
  replaceMany(nodes: readonly NodeIR[], added: NodeIR[], at: 'first' | 'last' = 'last'): void {
    this.order ??= new Map(this.graph.nodes.map((n, i) => [n, i]));
    const order = this.order;
    const sorted = [...nodes].sort((a, b) => order.get(a)! - order.get(b)!);
    for (const n of nodes) this.removed.add(n);
    this.replacement.set(at === 'first' ? sorted[0] : sorted.at(-1)!, added);
  }

  /** `base`, or `base` with underscores added: a name no initializer and no node output has (for a derived initializer). */
  freshName(base: string): string {
    let name = base;
    while (this.graph.initializers.has(name) || this.producer.has(name) || this.taken?.has(name)) name += '_';
    this.taken?.add(name);
    return name;
  }

  /** A node name that says where it came from. */
  name(kind: string, from: NodeIR): string {
    return `${from.name}/${kind}#${this.fresh++}`;
  }

  /**
   * Whether the view still describes the graph after a pass that replaced nothing (commit() 0), so
   * that the next pass can take it as it is instead of indexing the graph again: the indexes hold
   * only what passes change through replace (initializers are read from the graph each time).
   * Restarts the node names' numbering, as a new view would.
   */
  reusable(): boolean {
    if (this.removed.size !== 0 || this.replacement.size !== 0) return false;
    this.fresh = 0;
    return true;
  }

  /** Writes the pass into the graph: removed nodes dropped, new ones in their place, dead Constants dropped. */
  commit(): number {
    if (this.removed.size === 0) return 0;
    const nodes: NodeIR[] = [];
    for (const n of this.graph.nodes) {
      const r = this.replacement.get(n);
      if (r) nodes.push(...r);
      else if (!this.removed.has(n)) nodes.push(n);
    }
    const read = new Set<string>([...this.pinned]);
    for (const n of nodes) for (const i of n.inputs) if (i) read.add(i);
    this.graph.nodes = nodes.filter((n) => !(n.opType === 'Constant' && isDefaultDomain(n) && n.outputs.every((o) => !read.has(o))));
    return this.replacement.size;
  }
}

export const isDefaultDomain = (n: NodeIR): boolean => n.domain === '' || n.domain === 'ai.onnx';

export function fusedNode(
  view: GraphView,
  opType: string,
  from: NodeIR,
  inputs: string[],
  outputs: string[],
  attrs: Record<string, AttrValue> = {},
): NodeIR {
  return { name: view.name(opType, from), opType, domain: FUSED_DOMAIN, inputs, outputs, attributes: new Map(Object.entries(attrs)) };
}

export const floatAttr = (value: number): AttrValue => ({ type: 'float', value });
export const stringAttr = (value: string): AttrValue => ({ type: 'string', value });

/** The axes of a ReduceMean: its attribute (opset < 18) or its constant second input. */
export function reduceAxes(view: GraphView, n: NodeIR): number[] | undefined {
  const a = n.attributes.get('axes');
  if (a?.type === 'ints') return a.value;
  if (n.inputs[1]) {
    const t = view.constant(n.inputs[1]);
    return t ? Array.from(t.data as ArrayLike<number | bigint>, Number) : undefined;
  }
  return undefined;
}

/** ReduceMean over the last axis only, keeping it. */
export function meanOverLast(view: GraphView, n: NodeIR): boolean {
  const keep = n.attributes.get('keepdims');
  if (keep?.type === 'int' && keep.value === 0) return false;
  const axes = reduceAxes(view, n);
  return axes?.length === 1 && axes[0] === -1;
}
