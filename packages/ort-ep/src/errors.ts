// Every error this package throws on purpose: one base class, each subclass naming the model,
// node and op where it applies. A leaf module (it imports nothing), so every layer may use it.

/**
 * The brand every error of this package carries: the codes of its class and of each class above
 * it. `Symbol.for` makes it the same key in every copy of the package (an ES module and a CommonJS
 * instance, two installed versions), so `OrtMlxError.is(e)` and `instanceof` recognise an error
 * whichever copy threw it.
 */
const BRAND = Symbol.for('@mlx/ort-ep.error');

/** Base class of every error this package throws on purpose. */
export class OrtMlxError extends Error {
  /** A stable code per class, also on each instance as `code` (`'ERR_MLX_ORT'` for the base). */
  static readonly code: string = 'ERR_MLX_ORT';
  readonly code: string;

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    const codes: string[] = [];
    for (let c = new.target as unknown; typeof c === 'function' && c !== Error; c = Object.getPrototypeOf(c))
      if (Object.hasOwn(c, 'code')) codes.push((c as typeof OrtMlxError).code);
    this.code = codes[0];
    Object.defineProperty(this, BRAND, { value: Object.freeze(codes), enumerable: false });
  }

  /**
   * Whether `e` is an error of this class (or a subclass), thrown by any copy of this package:
   * `InvalidFeedError.is(e)`, `OrtMlxError.is(e)`. Unlike a plain `instanceof` check, it holds
   * across the ES module and CommonJS instances and across installed versions.
   */
  static is<C extends abstract new (...args: never[]) => OrtMlxError>(this: C, e: unknown): e is InstanceType<C> {
    // biome-ignore lint/complexity/noThisInStatic: `this` is the class is() was called on
    return hasCode(e, (this as unknown as typeof OrtMlxError).code);
  }

  /** `e instanceof InvalidFeedError`: the prototype chain, or else the brand (another copy's error). */
  static override [Symbol.hasInstance](e: unknown): boolean {
    // `this` is the class on the right of instanceof (a subclass inherits this method).
    // biome-ignore lint/complexity/noThisInStatic: the subclass asked, not OrtMlxError
    const cls = this as typeof OrtMlxError;
    return Function.prototype[Symbol.hasInstance].call(cls, e) || hasCode(e, cls.code);
  }
}

function hasCode(e: unknown, code: string): boolean {
  const codes = typeof e === 'object' && e !== null ? (e as Record<symbol, unknown>)[BRAND] : undefined;
  return Array.isArray(codes) && codes.includes(code);
}

/**
 * A model that cannot be loaded: a malformed or truncated file, a tensor whose data does not
 * match its shape, missing or unsafe external data, a dangling edge or a cycle. The message names
 * the model (where known), the tensor or node, and what is wrong.
 */
export class OnnxLoadError extends OrtMlxError {
  static override readonly code: string = 'ERR_MLX_ORT_LOAD';
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
  /**
   * The node breaks the ONNX (or contrib) spec (an entry's invalidNode()): refused everywhere,
   * never handed to the fallback. Otherwise MLX merely does not take it.
   */
  invalid?: boolean;
}

/** create() found nodes that the registry does not take. */
export class UnsupportedOperatorError extends OrtMlxError {
  static override readonly code: string = 'ERR_MLX_ORT_UNSUPPORTED_OPERATOR';
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
  static override readonly code: string = 'ERR_MLX_ORT_NODE_EXECUTION';
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
  static override readonly code: string = 'ERR_MLX_ORT_RUNTIME_TYPE_REFUSAL';
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
  static override readonly code: string = 'ERR_MLX_ORT_UNHOLDABLE_TYPE';
  constructor(readonly elemType: number) {
    super(`element type ${elemType} cannot be held by MLX`);
  }
}

/** A feed does not match the model's inputs. */
export class InvalidFeedError extends OrtMlxError {
  static override readonly code: string = 'ERR_MLX_ORT_INVALID_FEED';
}

/**
 * A run would need more memory than the session allows (maxTensorBytes, maxSessionBytes): refused
 * before anything is allocated. The message names the node where known, the shape and the bytes.
 */
export class ResourceLimitError extends OrtMlxError {
  static override readonly code: string = 'ERR_MLX_ORT_RESOURCE_LIMIT';
}

/**
 * Whether `e` says that memory could not be had: MLX's or the native library's allocation failure
 * (an MlxError with code ERR_MLX_ALLOCATION: "[malloc] Unable to allocate N bytes.", as under
 * `ulimit -v`), or V8's for a host buffer. The provider reports those as ResourceLimitError.
 */
export function isAllocationFailure(e: unknown): e is Error {
  if (!(e instanceof Error)) return false;
  if ((e as { code?: unknown }).code === 'ERR_MLX_ALLOCATION') return true;
  return e instanceof RangeError && /Array buffer allocation failed/.test(e.message);
}

/** An allocation failure (isAllocationFailure) as a ResourceLimitError naming the model and, where known, the node. */
export function allocationError(e: Error, modelName: string, where?: string): ResourceLimitError {
  const what = (e as { mlxMessage?: string }).mlxMessage ?? e.message;
  return new ResourceLimitError(`model ${modelName}: ${where ? `${where}: ` : ''}out of memory: ${what}`, { cause: e });
}

/** The caller stopped a run (onnxruntime-common's RunOptions.terminate set while it ran). */
export class RunTerminatedError extends OrtMlxError {
  static override readonly code: string = 'ERR_MLX_ORT_RUN_TERMINATED';
}

/**
 * A node that breaks the ONNX (or contrib) spec, such as a `group` of 0 or a `block_size` that is
 * not a power of two >= 16: create() refuses it (the message names the model, the node, the
 * attribute and its value), whether or not a fallback is allowed. Such a node is never handed to
 * onnxruntime, whose CPU kernels do not all check these values and crash the process on some.
 */
export class RefusedNodeError extends OrtMlxError {
  static override readonly code: string = 'ERR_MLX_ORT_REFUSED_NODE';
}

/**
 * valueAndGrad() cannot differentiate what it was asked to: a value that is not a floating-point
 * scalar, a name to differentiate with respect to that is no floating-point input or initializer,
 * nodes that read a differentiated value's data on the host (their results would be constants to
 * the gradient), nodes that run on onnxruntime (a fallback partition), or an MLX kernel without a
 * VJP. The message names the model and the nodes (also in `nodes`).
 */
export class NotDifferentiableError extends OrtMlxError {
  static override readonly code: string = 'ERR_MLX_ORT_NOT_DIFFERENTIABLE';
  /** The nodes that stand in the way, by name (empty where the value itself is the reason). */
  readonly nodes: readonly string[];

  constructor(message: string, options?: { cause?: unknown; nodes?: readonly string[] }) {
    super(message, options);
    this.nodes = Object.freeze([...(options?.nodes ?? [])]);
  }
}

/**
 * A parameter (an initializer of the model) that parameters(), setParameters() or trainStep() was
 * asked for and that the session cannot give or update: no initializer of that name, one that is
 * not floating-point, or one that a graph rewrite replaced by a value derived from it.
 */
export class UnknownParameterError extends OrtMlxError {
  static override readonly code: string = 'ERR_MLX_ORT_UNKNOWN_PARAMETER';
}

/** A new value for a parameter (setParameters) whose shape or element type is not the initializer's. */
export class ParameterMismatchError extends OrtMlxError {
  static override readonly code: string = 'ERR_MLX_ORT_PARAMETER_MISMATCH';
}

export function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
