// Every error this package throws on purpose: one base class, each subclass naming the model,
// node and op where it applies. A leaf module (it imports nothing), so every layer may use it.

/** Base class of every error this package throws on purpose. */
export class OrtMlxError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
  }
}

/**
 * A model that cannot be loaded: a malformed or truncated file, a tensor whose data does not
 * match its shape, missing or unsafe external data, a dangling edge or a cycle. The message names
 * the model (where known), the tensor or node, and what is wrong.
 */
export class OnnxLoadError extends OrtMlxError {
  /** The model file (or '<bytes>'), where known. */
  readonly model?: string;

  constructor(message: string, options?: { cause?: unknown; model?: string }) {
    super(options?.model ? `${options.model}: ${message}` : message, options);
    this.model = options?.model;
  }
}

export interface UnsupportedNode {
  opType: string;
  domain: string;
  opset: number;
  nodeName: string;
  reason: string;
}

/** create() found nodes that the registry does not take. */
export class UnsupportedOperatorError extends OrtMlxError {
  constructor(
    readonly model: string,
    readonly nodes: UnsupportedNode[],
    /** A last line: what would run them (the fallback option, a CPU backend to install). */
    hint = '',
  ) {
    const groups = new Map<string, UnsupportedNode[]>();
    for (const n of nodes) {
      const k = `${n.domain}::${n.opType} (opset ${n.opset}): ${n.reason}`;
      (groups.get(k) ?? groups.set(k, []).get(k)!).push(n);
    }
    const lines = [...groups].map(
      ([k, ns]) =>
        `  - ${k} [nodes: ${ns
          .slice(0, 5)
          .map((n) => n.nodeName || '<unnamed>')
          .join(', ')}${ns.length > 5 ? `, … ${ns.length - 5} more` : ''}]`,
    );
    super(
      `model ${model} has ${nodes.length} node(s) the MLX execution provider does not support:\n${lines.join('\n')}${hint ? `\n${hint}` : ''}`,
    );
  }
}

/** A node failed while running. */
export class NodeExecutionError extends OrtMlxError {
  constructor(
    readonly model: string,
    readonly nodeName: string,
    readonly opType: string,
    cause: unknown,
  ) {
    super(`model ${model}, node '${nodeName}' (${opType}): ${messageOf(cause)}`, { cause });
  }
}

/**
 * A node that MLX claimed at create(), when its input element types were not known yet, whose
 * check refuses the types it meets at run time (a string from an If branch, a type a Loop or a
 * Cast of an untyped value reveals). The session re-plans the node onto the fallback and runs
 * again; without a fallback it is the NodeExecutionError the caller sees.
 */
export class RuntimeTypeRefusal extends NodeExecutionError {
  constructor(
    model: string,
    nodeName: string,
    opType: string,
    /** The refused node (its NodeIR), in whichever graph or subgraph it sits. */
    readonly target: object,
    /** Why MLX does not take it, with the element types it was fed. */
    readonly reason: string,
    cause: unknown,
  ) {
    super(model, nodeName, opType, new Error(`${reason} (the element types became known only at run time)`, { cause }));
  }
}

/** A host tensor of an element type MLX has no dtype for (strings), asked to go to MLX. */
export class UnholdableTypeError extends OrtMlxError {
  constructor(readonly elemType: number) {
    super(`element type ${elemType} cannot be held by MLX`);
  }
}

/** A feed does not match the model's inputs. */
export class InvalidFeedError extends OrtMlxError {}

/**
 * A run would need more memory than the session allows (maxTensorBytes, maxSessionBytes): refused
 * before anything is allocated. The message names the node where known, the shape and the bytes.
 */
export class ResourceLimitError extends OrtMlxError {}

/** The caller stopped a run (onnxruntime-common's RunOptions.terminate set while it ran). */
export class RunTerminatedError extends OrtMlxError {}

export function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
