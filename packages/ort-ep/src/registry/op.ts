// Constructors for registry entries, one per ONNX domain, so that entries read as a table:
//   onnxOp('Relu', 6, { run: (ctx) => [mx.maximum(ctx.input(0), 0)] })
import { RefusedNodeError } from '../errors.js';
import type { OpEntry } from './types.js';

export const DOMAINS = {
  onnx: 'ai.onnx',
  microsoft: 'com.microsoft',
  ml: 'ai.onnx.ml',
  training: 'ai.onnx.preview.training',
  preview: 'ai.onnx.preview',
} as const;

type Body<P> = Omit<OpEntry<P>, 'domain' | 'opType' | 'since'>;

function maker(domain: string) {
  return <P = undefined>(opType: string, since: number, body: Body<P>): OpEntry<P> => ({ domain, opType, since, ...body });
}

/** An entry of the default ONNX domain (ai.onnx). */
export const onnxOp = maker(DOMAINS.onnx);
/** An entry of onnxruntime's contrib domain (com.microsoft). */
export const msOp = maker(DOMAINS.microsoft);
/** An entry of the ONNX-ML domain (ai.onnx.ml). */
export const mlOp = maker(DOMAINS.ml);
/** An entry of the preview training domain (ai.onnx.preview.training). */
export const trainingOp = maker(DOMAINS.training);

/**
 * The error an entry's parse() or check() throws for a node that breaks the ONNX (or contrib)
 * spec, such as a `group` of 0 or a `block_size` that is not a power of two >= 16: the node is
 * invalid everywhere, so create() refuses it and it is never handed to onnxruntime (whose CPU
 * kernels do not all check such values and crash the process on some). A node MLX merely does
 * not take (an attribute value it lacks, an element type) is not invalid: check() returns why,
 * and the node goes to the fallback.
 */
export function invalidNode(message: string): RefusedNodeError {
  return new RefusedNodeError(message);
}
