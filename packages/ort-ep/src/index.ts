// @mlx/ort-ep: ONNX models on MLX through onnxruntime's JavaScript API.
//   import * as ort from 'onnxruntime-node';   // or 'onnxruntime-common', 'onnxruntime-web'
//   import { mlx } from '@mlx/ort-ep';           // registers the 'mlx' backend
//   const s = await ort.InferenceSession.create('model.onnx', { executionProviders: [mlx({ device: 'gpu' })] });
// Importing it loads nothing native: the backend's init() loads MLX when a session asks for 'mlx'.
export {
  mlx,
  mlxRegistrations,
  registerMlxBackend,
  createMlxBackend,
  tensorToHost,
  hostToTensor,
  MLX_BACKEND_NAME,
  MLX_BACKEND_PRIORITY,
  type MlxExecutionProviderOption,
  type MlxProviderOptions,
  type MlxRegistration,
  MlxDeviceBuffer,
  deviceBufferOf,
} from './backend/handler.js';
export { MlxSession, type MlxSessionOptions, type MlxRunOptions, type TensorMetadata } from './session.js';
export { generate, pickToken, cacheNames, type GenerateOptions, type SamplingOptions } from './generate.js';
export { transferStats, type TransferStats } from './runtime/convert.js';
export {
  OrtMlxError,
  UnsupportedOperatorError,
  NodeExecutionError,
  InvalidFeedError,
  ResourceLimitError,
  RunTerminatedError,
  type UnsupportedNode,
} from './errors.js';
export { OpRegistry } from './registry/registry.js';
export type { OpEntry, OpContext, CheckContext } from './registry/types.js';
export type { Value, KvReserve, MapValue } from './runtime/value.js';
export { defaultRegistry } from './ops/index.js';
export * from './onnx/index.js';
