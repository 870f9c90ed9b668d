/**
 * A model that cannot be loaded: a malformed or truncated file, a tensor whose data does not
 * match its shape, missing or unsafe external data, a dangling edge or a cycle. The message names
 * the model (where known), the tensor or node, and what is wrong.
 */
export class OnnxLoadError extends Error {
  /** The model file (or '<bytes>'), where known. */
  readonly model?: string;

  constructor(message: string, options?: { cause?: unknown; model?: string }) {
    super(options?.model ? `${options.model}: ${message}` : message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'OnnxLoadError';
    this.model = options?.model;
  }
}

export function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
