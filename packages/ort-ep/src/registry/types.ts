// The op registry's vocabulary. One OpEntry per (domain, op type, opset range) answers both
// questions the planner asks: can you take this node (yes, or why not) and translate it.
import type * as mx from '@mlx/core';
import type { GraphIR, HostTensor, NodeIR } from '../onnx/index.js';
import type { Attrs } from './attrs.js';
import type { Value } from '../runtime/value.js';

export interface CheckContext {
  node: NodeIR;
  opset: number;
  attrs: Attrs;
  /** Static knowledge of input i, where the planner has it (initializer or constant). */
  constantInput(i: number): HostTensor | undefined;
  /** The declared ONNX element type of input i, where known. */
  inputType(i: number): number | undefined;
}

export interface OpContext extends CheckContext {
  /** Number of inputs the node lists (omitted optional inputs count; see has()). */
  readonly inputCount: number;
  /** Whether optional input i is present. */
  has(i: number): boolean;
  /** Input i as an MLX array (host values are uploaded once and cached). */
  input(i: number): mx.Array;
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
  /** Runs a subgraph attribute (If/Loop/Scan bodies) with the given inputs; outer-scope names resolve to this graph's values. */
  runSubgraph(graph: GraphIR, inputs: Value[]): Value[];
  /** Names the node for error messages. */
  readonly where: string;
}

/** What an op returns per output: a device array, a host tensor, or a full Value. */
export type OpResult = mx.Array | HostTensor | Value | undefined;

export interface OpEntry {
  domain: string; // 'ai.onnx', 'com.microsoft', ...
  opType: string;
  /** Opset range (inclusive) this entry implements. */
  since: number;
  until?: number;
  /** Returns undefined when the node can be taken, or a sentence saying why not. */
  check?(ctx: CheckContext): string | undefined;
  /** Host implementation for shape math: used when every input is on the host and the result is small. */
  host?(ctx: OpContext): HostTensor[] | undefined;
  /** Translates the node into MLX ops. */
  run(ctx: OpContext): OpResult[];
  /** A one-line note for OPERATORS.md (limitations, attributes not supported). */
  note?: string;
}
