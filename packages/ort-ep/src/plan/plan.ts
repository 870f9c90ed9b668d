// Planning of one graph (the main graph or an If/Loop/Scan body): every node looked up in the
// registry, its attributes parsed and checked once, subgraph attributes planned with the graph,
// and the analysis that runs need (which node produces each value, which nodes outputs need).
import { DEFAULT_DOMAIN, OnnxDataType, outerReferences, type GraphIR, type HostTensor, type NodeIR } from '../onnx/index.js';
import { Attrs } from '../registry/attrs.js';
import type { OpRegistry } from '../registry/registry.js';
import type { CheckContext } from '../registry/types.js';
import type { Value } from '../runtime/value.js';
import { messageOf, type UnsupportedNode, RefusedNodeError } from '../errors.js';
import type { GraphPlan, PlannedNode } from './graph-plan.js';

export interface PlanOptions {
  registry: OpRegistry;
  opsets: Map<string, number>;
  modelName: string;
  /**
   * Op types the provider declines (MlxSessionOptions.disabledOps): 'Softmax' (any domain) or
   * 'com.microsoft::Attention'.
   */
  disabledOps?: ReadonlySet<string>;
  /**
   * Nodes (NodeIR objects, in any graph) that fall back whatever the registry says, with the
   * reason: those whose check refused the element types they met at run time (RuntimeTypeRefusal).
   */
  forced?: ReadonlyMap<object, string>;
}

/** Whether `disabledOps` names this node's op type. */
export function isDisabled(disabled: ReadonlySet<string> | undefined, domain: string, opType: string): boolean {
  return !!disabled && (disabled.has(opType) || disabled.has(`${domain}::${opType}`));
}

function opsetFor(node: NodeIR, opsets: Map<string, number>): number {
  const override = (node as NodeIR & { opsetOverride?: number }).opsetOverride;
  if (override !== undefined) return override;
  return opsets.get(node.domain || DEFAULT_DOMAIN) ?? 1;
}

// Ops whose outputs have the element type of one input (which), for the element types the plan
// knows before any run (checks refuse a node whose input type MLX cannot take, so that it falls back).
const SAME_TYPE_AS: Record<string, number> = Object.fromEntries([
  ...[
    'Identity',
    'Reshape',
    'Squeeze',
    'Unsqueeze',
    'Flatten',
    'Transpose',
    'Gather',
    'GatherElements',
    'GatherND',
    'Slice',
    'Concat',
    'Expand',
    'Tile',
    'Split',
    'Pad',
    'Compress',
    'ReverseSequence',
    'DepthToSpace',
    'SpaceToDepth',
    'Neg',
    'Abs',
    'Relu',
    'Add',
    'Sub',
    'Mul',
    'Div',
    'Max',
    'Min',
    'ScatterND',
    'ScatterElements',
    'Trilu',
  ].map((op) => [op, 0]),
  ['Where', 1],
]);
const ALWAYS: Record<string, number> = {
  Shape: OnnxDataType.INT64,
  Size: OnnxDataType.INT64,
  NonZero: OnnxDataType.INT64,
  Equal: OnnxDataType.BOOL,
  Less: OnnxDataType.BOOL,
  Greater: OnnxDataType.BOOL,
  LessOrEqual: OnnxDataType.BOOL,
  GreaterOrEqual: OnnxDataType.BOOL,
  Not: OnnxDataType.BOOL,
  And: OnnxDataType.BOOL,
  Or: OnnxDataType.BOOL,
  Xor: OnnxDataType.BOOL,
  IsNaN: OnnxDataType.BOOL,
  IsInf: OnnxDataType.BOOL,
  RegexFullMatch: OnnxDataType.BOOL,
  StringConcat: OnnxDataType.STRING,
  StringNormalizer: OnnxDataType.STRING,
};

/** The element types of a node's outputs that follow from its inputs' (undefined where unknown). */
function outputTypes(node: NodeIR, typeOf: (name: string) => number | undefined): (number | undefined)[] {
  if (node.domain !== DEFAULT_DOMAIN) return [];
  const attr = node.attributes;
  if (node.opType === 'Cast') {
    const to = attr.get('to');
    return [to?.type === 'int' ? Number(to.value) : undefined];
  }
  if (node.opType === 'CastLike') return [typeOf(node.inputs[1] ?? '')];
  if (node.opType === 'Constant') {
    const a = attr.get('value');
    if (a?.type === 'tensor') return [a.value.dtype];
    if (attr.has('value_string') || attr.has('value_strings')) return [OnnxDataType.STRING];
    if (attr.has('value_float') || attr.has('value_floats')) return [OnnxDataType.FLOAT];
    if (attr.has('value_int') || attr.has('value_ints')) return [OnnxDataType.INT64];
    return [];
  }
  if (ALWAYS[node.opType] !== undefined) return [ALWAYS[node.opType]];
  const from = SAME_TYPE_AS[node.opType];
  if (from === undefined) return [];
  const t = typeOf(node.inputs[from] ?? '');
  return node.opType === 'Split' ? node.outputs.map(() => t) : [t];
}

/** The element type of the sequence (or optional) output 0 of a node makes, where it follows from its inputs. */
function elementTypeMade(
  node: NodeIR,
  typeOf: (name: string) => number | undefined,
  elemOf: (name: string) => number | undefined,
): number | undefined {
  if (node.domain !== DEFAULT_DOMAIN) return undefined;
  const input = (i: number) => node.inputs[i] ?? '';
  switch (node.opType) {
    case 'SplitToSequence':
    case 'SequenceConstruct':
      return typeOf(input(0));
    case 'SequenceEmpty': {
      const a = node.attributes.get('dtype');
      return a?.type === 'int' ? Number(a.value) : OnnxDataType.FLOAT;
    }
    case 'SequenceInsert':
      return elemOf(input(0)) ?? typeOf(input(1));
    case 'SequenceErase':
      return elemOf(input(0));
    case 'Optional':
      // An optional tensor (an optional sequence's element type is not recorded: its form differs).
      return node.inputs[0] ? typeOf(input(0)) : undefined;
    default:
      return undefined;
  }
}

/**
 * Plans a graph; unsupported nodes (including those inside subgraphs) are appended to `unsupported`.
 * `outerTypes`: the element types known in the enclosing scopes (for a subgraph).
 */
export function planGraph(
  graph: GraphIR,
  opts: PlanOptions,
  unsupported: UnsupportedNode[],
  outerTypes?: ReadonlyMap<string, number>,
): GraphPlan {
  const constants = new Map<string, Value>();
  for (const [name, t] of graph.initializers) constants.set(name, { kind: 'host', tensor: t });
  // Element types known before any run: declared ones, initializers', and what follows from them.
  const types = new Map<string, number>(outerTypes);
  for (const v of graph.inputs) types.delete(v.name); // a body's inputs hide outer values of their names
  for (const v of [...graph.inputs, ...graph.valueInfo.values(), ...graph.outputs])
    if (v.type.kind === 'tensor' && v.type.elemType) types.set(v.name, v.type.elemType);
  for (const [name, t] of graph.initializers) types.set(name, t.dtype);
  const typeOf = (name: string) => (name ? types.get(name) : undefined);
  const elementTypes = new Map<string, number>();
  const nodes: PlannedNode[] = [];
  const producer = new Map<string, number>();
  const subplans = new Map<GraphIR, GraphPlan>();
  const constantInput = (node: NodeIR, i: number): HostTensor | undefined => {
    const v = constants.get(node.inputs[i] ?? '');
    return v?.kind === 'host' ? v.tensor : undefined;
  };
  for (const node of graph.nodes) {
    const domain = node.domain || DEFAULT_DOMAIN;
    const opset = opsetFor(node, opts.opsets);
    const attrs = new Attrs(node);
    let entry = opts.registry.lookup(domain, node.opType, opset);
    let params: unknown;
    let why: string | undefined;
    const fail = (reason: string) => {
      unsupported.push({ opType: node.opType, domain, opset, nodeName: node.name, reason });
      entry = undefined;
      why = reason;
    };
    if (!entry) fail(opts.registry.explainMissing(domain, node.opType, opset));
    else if (isDisabled(opts.disabledOps, domain, node.opType)) fail('disabled by the disabledOps option');
    else if (opts.forced?.has(node)) fail(opts.forced.get(node)!);
    else {
      let reason: string | undefined;
      try {
        params = entry.parse?.(attrs, opset);
        const check: CheckContext = {
          node,
          opset,
          attrs,
          params,
          constantInput: (i) => constantInput(node, i),
          inputType: (i) => constantInput(node, i)?.dtype ?? typeOf(node.inputs[i] ?? ''),
        };
        reason = entry.check?.(check);
      } catch (e) {
        // An invalid node (invalidNode(), registry/op.ts) is marked so: planModel refuses the
        // model, and the node never goes to the fallback (onnxruntime's kernels do not all check
        // such values and crash the process on some).
        if (e instanceof RefusedNodeError) {
          unsupported.push({
            opType: node.opType,
            domain,
            opset,
            nodeName: node.name,
            reason: `invalid node: ${e.message}`,
            invalid: true,
          });
          entry = undefined;
          why = `invalid node: ${e.message}`;
        } else reason = `invalid node: ${messageOf(e)}`;
      }
      if (reason) fail(reason);
    }
    const subgraphs = attrs.graphs();
    for (const g of subgraphs) subplans.set(g, planGraph(g, opts, unsupported, types));
    outputTypes(node, typeOf).forEach((t, k) => {
      const o = node.outputs[k];
      if (o && t && !types.has(o)) types.set(o, t);
    });
    const elem = elementTypeMade(node, typeOf, (name) => elementTypes.get(name));
    if (elem && node.outputs[0] && !elementTypes.has(node.outputs[0])) elementTypes.set(node.outputs[0], elem);
    const outerReads = [...new Set(subgraphs.flatMap((g) => [...outerReferences(g)]))];
    for (const o of node.outputs) if (o) producer.set(o, nodes.length);
    nodes.push({ node, entry, opset, attrs, params, subgraphs, outerReads, ...(why !== undefined && { reason: why }) });
  }
  const overridable = new Set(graph.inputs.map((i) => i.name));
  return { graph, nodes, constants, overridable, producer, subplans, modelName: opts.modelName, elementTypes };
}

/** The indices of the nodes needed to compute `names`, in graph order. */
export function neededNodes(plan: GraphPlan, names: Iterable<string>): number[] {
  const need = new Set<number>();
  const stack = [...names];
  while (stack.length) {
    const n = stack.pop()!;
    if (plan.constants.has(n)) continue; // initializer or folded at plan time
    const idx = plan.producer.get(n);
    if (idx === undefined || need.has(idx)) continue;
    need.add(idx);
    const pn = plan.nodes[idx];
    for (const i of pn.node.inputs) if (i) stack.push(i);
    // Subgraphs may read outer values by name.
    for (const name of pn.outerReads) stack.push(name);
  }
  return [...need].sort((a, b) => a - b);
}
