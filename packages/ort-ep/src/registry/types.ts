// The op registry's vocabulary. One OpEntry per (domain, op type, opset range) answers both
// questions the planner asks: can you take this node (yes, or why not) and translate it.
import type * as mx from '@mlx/core';
import type { AttentionVjpOptions } from '@mlx/kernels';
import type { GraphIR, HostTensor, NodeIR } from '../onnx/index.js';
import type { Value } from '../runtime/value.js';
import type { Attrs } from './attrs.js';

export interface CheckContext<P = unknown> {
  node: NodeIR;
  opset: number;
  attrs: Attrs;
  /** What the entry's parse() made of the node's attributes, once, at plan time. */
  params: P;
  /** Static knowledge of input i, where the planner has it (initializer or constant). */
  constantInput(i: number): HostTensor | undefined;
  /** The declared ONNX element type of input i, where known. */
  inputType(i: number): number | undefined;
}

export interface OpContext<P = unknown> extends CheckContext<P> {
  /** Number of inputs the node lists (omitted optional inputs count; see has()). */
  readonly inputCount: number;
  /** Whether optional input i is present. */
  has(i: number): boolean;
  /** Input i as an MLX array (host values are uploaded once and cached). */
  input(i: number): mx.Array;
  /**
   * Input i reshaped to `dims` (concrete, of the input's size): where the input is a constant
   * (an initializer or a folded value held on the host), the reshaped array is made once per
   * session, so no reshape node is built per run; otherwise mx.reshape.
   */
  inputReshaped(i: number, dims: readonly number[]): mx.Array;
  /** Optional input i as an MLX array, or undefined when it is omitted or empty. */
  optional(i: number): mx.Array | undefined;
  /** Input i on the host. Device values are evaluated and copied (a sync point; use for small, data-dependent arguments). */
  host(i: number): HostTensor;
  /** Input i as a host tensor if it already is one (no sync), else undefined. */
  hostIfKnown(i: number): HostTensor | undefined;
  /** The raw value of input i (sequences, optionals). */
  value(i: number): Value;
  /** The ONNX element type of input i (from its value). */
  elemType(i: number): number;
  /** The shape of input i, known without evaluating. */
  shape(i: number): number[];
  /** Whether output o is used (the node names it); optional outputs nobody reads need not be computed. */
  wants(o: number): boolean;
  /** A value as an MLX array, uploading host tensors through the run's cache. */
  toArray(v: Value): mx.Array;
  /** Runs a subgraph attribute (If/Loop/Scan bodies) with the given inputs; outer-scope names resolve to this graph's values. */
  runSubgraph(graph: GraphIR, inputs: Value[]): Value[];
  /**
   * Runs a subgraph only to learn what it would produce (the shapes and types of its outputs, e.g.
   * a Loop body's scan outputs when no iteration runs): device work stays lazy and is dropped, the
   * checks it registers (guard) are discarded, and undefined comes back where it throws.
   */
  traceSubgraph(graph: GraphIR, inputs: Value[]): Value[] | undefined;
  /**
   * Checks data on the device, without a host round trip per node: `bad` is a boolean scalar
   * computed with the results (an index out of range, a zero divisor). The op makes its own work
   * safe regardless (clamped indices, a divisor of 1), and when `bad` turns out true the run fails
   * with a NodeExecutionError naming the node, the message `describe(detail)` where `detail` is
   * the flattened values of `detail` (e.g. the smallest and largest index seen).
   */
  guard(bad: mx.Array, describe: (detail: number[]) => string, detail?: mx.Array): void;
  /**
   * A value that several nodes of one run build alike (the positions, rotary rows and mask that
   * every attention layer of a decoding step derives from the same inputs): make() runs for the
   * first node that asks with these parts (the arrays and numbers it derives from, compared by
   * identity, and a string naming what it is), and later nodes get the same value, so that the
   * graph holds it once. Only for values that depend on nothing but the parts.
   */
  shared<T>(parts: readonly unknown[], make: () => T): T;
  /**
   * make()'s value, derived from nothing but inputs `inputs` (indices) of this node: made once per
   * session when they are all the session's constants (initializers, folded constants), its
   * arrays evaluated then and kept (e.g. per-direction transposed weights), else once per run
   * (like shared). `tag` names what it is, apart from the node's other prepared values. make()
   * reads the inputs itself (input(i)); it must not depend on anything else.
   */
  prepared<T>(inputs: readonly number[], tag: string, make: () => T): T;
  /**
   * While the run is differentiated (valueAndGrad, trainStep): the backward pass that attention
   * nodes ask of @mlx/kernels (its workspace budget and strategy), as scaledDotProductAttention's
   * `vjp` option; undefined otherwise (the kernels' defaults).
   */
  readonly attentionVjp?: AttentionVjpOptions | undefined;
  /** Names the node for error messages. */
  readonly where: string;
  /** The model's name, for errors that name the model and the node (ResourceLimitError). */
  readonly modelName: string;
  /** The run's memory budget (0: no limit), for ops whose results accumulate over iterations (Loop, Scan). */
  readonly limits: { readonly maxTensorBytes: number; readonly maxSessionBytes: number };
  /** Whether pause() hands control back (run(), top-level nodes); elsewhere it returns at once. */
  canPause(): boolean;
  /**
   * For ops that iterate for long (Loop, Scan): where the run does not block (run(), a top-level
   * node), stores `progress`, hands `arrays` to the driver to evaluate off the JS thread and
   * returns to the event loop (the run stays abortable); the node is then called again and takes
   * `progress` back with resume(). Elsewhere (runSync, subgraphs, traces) it returns at once.
   */
  pause(arrays: mx.Array[], progress: unknown): void;
  /** What the node stored at its last pause in this run, once (undefined on its first call). */
  resume<T>(): T | undefined;
}

/** What an op returns per output: a device array, a host tensor, or a full Value. */
export type OpResult = mx.Array | HostTensor | Value | undefined;

/**
 * Where a node runs, declared by its entry and applied by one rule (execute/placement.ts):
 * - 'device' (the default): run() builds MLX ops; an entry with a host() twin runs that instead
 *   when every input is a small host tensor (shape math), or when an input has an element type
 *   MLX cannot hold (strings, float8, ...);
 * - 'host': host() only (string ops, tree walks): MLX has nothing to run them with.
 */
export type Placement = 'device' | 'host';

// `any` is the entry's own parameter type, erased where entries of every kind sit in one table.
// biome-ignore lint/suspicious/noExplicitAny: the entry's parameter type is erased in the shared table
export interface OpEntry<P = any> {
  domain: string; // 'ai.onnx', 'com.microsoft', ...
  opType: string;
  /** Opset range (inclusive) this entry implements. */
  since: number;
  until?: number;
  /**
   * Reads the node's attributes once, at plan time, with the spec's defaults; the result reaches
   * check(), host() and run() as ctx.params. Two kinds of failure, kept apart:
   * - the node is invalid (it breaks the ONNX or contrib spec: `group` 0, `block_size` 0, zero
   *   strides): throw `invalidNode(...)` (registry/op.ts): create() refuses the node with a
   *   RefusedNodeError, and it never reaches onnxruntime, whose kernels crash on some such values;
   * - anything else thrown (an attribute MLX cannot read, an unknown mode): the node falls back,
   *   and onnxruntime judges it, so that a model onnxruntime runs still runs.
   */
  parse?(attrs: Attrs, opset: number): P;
  /**
   * Returns undefined when the node can be taken, or a sentence saying why MLX does not take it
   * ("unsupported here": the node falls back to onnxruntime). For a node that is invalid (it
   * breaks the spec, see parse), throw `invalidNode(...)` instead: it is refused everywhere.
   */
  check?(ctx: CheckContext<P>): string | undefined;
  /** See Placement. Default 'device'. */
  placement?: Placement;
  /**
   * The host implementation: the whole op for placement 'host', else a twin for shape math. A
   * twin may return undefined to leave the node to run().
   */
  host?(ctx: OpContext<P>): HostTensor[] | undefined;
  /**
   * For host twins whose result can be much larger than their inputs (Expand, Tile,
   * ConstantOfShape, Range, broadcasting): the number of elements the host result would have,
   * so that the placement rule sends large results to the device instead.
   */
  hostSize?(ctx: OpContext<P>): number;
  /** Translates the node into MLX ops (required unless placement is 'host'). */
  run?(ctx: OpContext<P>): OpResult[];
  /** A one-line note for OPERATORS.md (limitations, attributes not supported). */
  note?: string;
}
