// The plan's data model: a planned graph (GraphPlan), its planned nodes (PlannedNode), and the
// fallback partition a node may stand for (FallbackPartition: the sub-model onnxruntime runs).
// They refer to each other, so they live together; planning is plan.ts, partitioning partition.ts.
import type { GraphIR, HostTensor, NodeIR, TypeIR } from '../onnx/index.js';
import { encodeGraphProto, encodeModel, encodeNode, encodeTensor, encodeValueInfo } from '../onnx/encode.js';
import type { Attrs } from '../registry/attrs.js';
import type { OpEntry } from '../registry/types.js';
import type { Value } from '../runtime/value.js';
import { boundaryGraph, outputFormOf, type InputForm, type NonTensorKind, type OutputForm } from './boundary.js';

export interface PlannedNode {
  node: NodeIR;
  /** Undefined for a node the registry does not take (listed in the plan's `unsupported`). */
  entry: OpEntry | undefined;
  opset: number;
  attrs: Attrs;
  /** What entry.parse made of the attributes (undefined without a parse). */
  params: unknown;
  /** The subgraph attributes (If/Loop/Scan bodies), in attribute order. */
  subgraphs: GraphIR[];
  /** Names the node's subgraphs read from enclosing scopes. */
  outerReads: string[];
  /** Why the registry does not take the node (set when entry is undefined). */
  reason?: string;
  /** Set on the node that stands for a fallback partition (plan/partition.ts): onnxruntime runs it. */
  fallback?: FallbackPartition;
}

export interface GraphPlan {
  graph: GraphIR;
  nodes: PlannedNode[];
  /** Values known before any run: initializers and folded nodes. */
  constants: Map<string, Value>;
  /** Initializers that are also graph inputs: defaults a feed may override, so never folded. */
  overridable: Set<string>;
  /** Node index producing each value name. */
  producer: Map<string, number>;
  /** Plans of subgraph attributes, by graph object. */
  subplans: Map<GraphIR, GraphPlan>;
  modelName: string;
  /**
   * The element types of sequences (and of optionals' tensors) known before any run, from the ops
   * that make them: a sequence or optional crossing to MLX from onnxruntime comes back in tensor
   * form, which needs its element type (plan/boundary.ts).
   */
  elementTypes?: Map<string, number>;
  /** Initializers whose host copy was dropped once MLX held them (makeConstantsResident): a re-plan reads them back. */
  residentInitializers?: Set<string>;
}

/**
 * Ops whose results differ from run to run (random generators, Dropout in training mode): never
 * folded, and on the compiled path always run eagerly, since a trace would replay its draws.
 */
export const NONDETERMINISTIC: ReadonlySet<string> = new Set([
  'RandomNormal',
  'RandomUniform',
  'RandomNormalLike',
  'RandomUniformLike',
  'Multinomial',
  'Bernoulli',
  'Dropout',
]);

export function isNondeterministic(pn: PlannedNode): boolean {
  if (pn.fallback) return pn.fallback.nondeterministic;
  return NONDETERMINISTIC.has(pn.node.opType);
}

/** The model-level facts a sub-model needs. */
export interface ModelFacts {
  irVersion: number;
  opsets: Map<string, number>;
  graph: GraphIR;
  /** Values known not to be tensors (boundary.ts). */
  kinds: Map<string, NonTensorKind>;
  /** Element types of sequences and optionals that follow from the ops making them (GraphPlan.elementTypes). */
  elementTypes: ReadonlyMap<string, number>;
}

/**
 * One fallback partition: its nodes, the values it reads (`inputs`) and makes for the rest of the
 * graph (`outputs`), and the initializers it reads, which go into its sub-model.
 */
export class FallbackPartition {
  /** Initializers the sub-model holds, until it is built (then onnxruntime has its own copy). */
  private sources: Map<string, HostTensor> | undefined;

  constructor(
    /** 0, 1, ... in run order. */
    readonly index: number,
    readonly nodes: PlannedNode[],
    readonly inputs: string[],
    readonly outputs: string[],
    initializers: Map<string, HostTensor>,
    /** Why each node falls back, in node order. */
    readonly reasons: string[],
    private readonly facts: ModelFacts,
  ) {
    this.sources = initializers;
  }

  get nondeterministic(): boolean {
    return this.nodes.some((pn) => NONDETERMINISTIC.has(pn.node.opType));
  }

  /** The type each input is known to have before any run (a graph input's declared type, a value info's element type). */
  declaredType(name: string): TypeIR | undefined {
    const g = this.facts.graph;
    const input = g.inputs.find((i) => i.name === name);
    if (input && (input.type.kind !== 'tensor' || input.type.elemType) && input.type.kind !== 'unknown') return input.type;
    const info = g.valueInfo.get(name)?.type;
    if (info?.kind === 'tensor' && info.elemType) return { kind: 'tensor', elemType: info.elemType };
    if (info && info.kind !== 'tensor' && info.kind !== 'unknown') return info;
    return undefined;
  }

  /** Whether a value is known to be a sequence, an optional or a map (it then crosses in tensor form, boundary.ts). */
  nonTensorKind(name: string): NonTensorKind | undefined {
    const t = this.declaredType(name) ?? this.facts.graph.outputs.find((o) => o.name === name)?.type;
    if (t?.kind === 'sequence' || t?.kind === 'optional' || t?.kind === 'map') return t.kind;
    return this.facts.kinds.get(name);
  }

  /** How each output comes back; throws naming an output that cannot (a map, an undeclared element type). */
  outputForms(): OutputForm[] {
    const g = this.facts.graph;
    return this.outputs.map((name) => {
      const declared = g.outputs.find((o) => o.name === name)?.type ?? g.valueInfo.get(name)?.type;
      const kind = this.nonTensorKind(name);
      const elemType = this.facts.elementTypes.get(name);
      const known =
        !declared || declared.kind === 'unknown' || ((declared.kind === 'sequence' || declared.kind === 'optional') && !declared.elem);
      // No declared element type: the one that follows from the op making the value.
      const type: TypeIR | undefined =
        known && elemType && (kind === 'sequence' || kind === 'optional') ? { kind, elem: { kind: 'tensor', elemType } } : declared;
      return outputFormOf(name, type, kind);
    });
  }

  /**
   * The sub-model (ModelProto bytes): the partition's nodes, their initializers, the model's opset
   * imports, the value infos of values made inside, and inputs of the given types and forms
   * (sequence and optional values cross in tensor form, boundary.ts). Functions were inlined when
   * the model was loaded, so the nodes are those of their bodies.
   */
  subModel(inputTypes: readonly TypeIR[], inputForms: readonly InputForm[] = inputTypes.map(() => ({ kind: 'tensor' }))): Uint8Array {
    const sources = this.sources;
    if (!sources) throw new Error(`internal error: the sub-model of fallback partition ${this.index} was already built`);
    const g = this.facts.graph;
    const made = new Set(this.nodes.flatMap((pn) => pn.node.outputs.filter((o) => o)));
    const b = boundaryGraph(this.inputs, inputForms, this.outputs, this.outputForms(), inputTypes);
    const graph = encodeGraphProto({
      name: `${g.name || 'graph'}_fallback_${this.index}`,
      node: [...b.before, ...this.nodes.map((pn) => pn.node), ...b.after].map((n) => encodeNode(n)),
      input: b.inputs.map(({ name, type }) => encodeValueInfo(name, type.kind === 'unknown' ? undefined : type)),
      output: b.outputs.map((name) => encodeValueInfo(name)),
      initializer: [...sources].map(([name, t]) => encodeTensor(t, name)),
      valueInfo: [...g.valueInfo.values()]
        .filter((v) => made.has(v.name) && v.type.kind !== 'unknown')
        .map((v) => encodeValueInfo(v.name, v.type)),
    });
    // Initializers that are not graph inputs need IR version 4.
    return encodeModel({ irVersion: Math.max(this.facts.irVersion, 4), opsets: this.facts.opsets, graph });
  }

  /** Drops the initializers once onnxruntime holds the sub-model (only when no other form of it will be built). */
  releaseSources(): void {
    this.sources = undefined;
  }
}
