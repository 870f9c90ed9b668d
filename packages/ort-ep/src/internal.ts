// @mlx/ort-ep/internal: the pieces under the public API that the project's tools, tests and
// benchmarks use (model decoding, the op registry, tensor conversion, the backend's parts). No
// compatibility promise: names here may change in any release. The public API is './index.ts'.
import './backend/register.js';

export * from './onnx/index.js';
export { OpRegistry } from './registry/registry.js';
export type { OpEntry, OpContext, CheckContext } from './registry/types.js';
export { defaultRegistry } from './ops/index.js';
export { MLX_BACKEND_NAME, MLX_BACKEND_PRIORITY } from './backend/options.js';
export { createMlxBackend } from './backend/handler.js';
export { tensorToHost, hostToTensor } from './backend/tensors.js';
export { pickToken, applyPenalties, lookupDraft, cacheNames } from './generate.js';
export { drawFrom, samplingDistribution, speculativeAccept } from './generate-speculative.js';
export { RuntimeTypeRefusal, UnholdableTypeError } from './errors.js';
