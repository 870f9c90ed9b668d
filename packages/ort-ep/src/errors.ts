// Errors a user can cause, each naming the model, node and op where it applies.

/** Base class of every error this package throws on purpose. */
export class OrtMlxError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
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
  constructor(readonly model: string, readonly nodes: UnsupportedNode[]) {
    const groups = new Map<string, UnsupportedNode[]>();
    for (const n of nodes) {
      const k = `${n.domain}::${n.opType} (opset ${n.opset}): ${n.reason}`;
      (groups.get(k) ?? groups.set(k, []).get(k)!).push(n);
    }
    const lines = [...groups].map(([k, ns]) => `  - ${k} [nodes: ${ns.slice(0, 5).map((n) => n.nodeName || '<unnamed>').join(', ')}${ns.length > 5 ? `, … ${ns.length - 5} more` : ''}]`);
    super(`model ${model} has ${nodes.length} node(s) the MLX execution provider does not support:\n${lines.join('\n')}`);
  }
}

/** A node failed while running. */
export class NodeExecutionError extends OrtMlxError {
  constructor(readonly model: string, readonly nodeName: string, readonly opType: string, cause: unknown) {
    super(`model ${model}, node '${nodeName}' (${opType}): ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
}

/** A feed does not match the model's inputs. */
export class InvalidFeedError extends OrtMlxError {}
