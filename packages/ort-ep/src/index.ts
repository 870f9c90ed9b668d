// @mlx/ort-ep: ONNX models on MLX through onnxruntime's JavaScript API.
//   import * as ort from 'onnxruntime-node';   // or 'onnxruntime-common', 'onnxruntime-web'
//   import { mlx } from '@mlx/ort-ep';           // registers the 'mlx' backend
//   const s = await ort.InferenceSession.create('model.onnx', { executionProviders: [mlx({ device: 'gpu' })] });
// Importing it loads nothing native: the backend's init() loads MLX when a session asks for 'mlx'.
// This is the whole public API, each name documented in the README; what tools and tests need
// beyond it is in './internal.ts' (`@mlx/ort-ep/internal`, no compatibility promise).
export { mlx, type MlxExecutionProviderOption, type MlxProviderOptions } from './backend/options.js';
export { registerMlxBackend, mlxRegistrations, type MlxRegistration } from './backend/register.js';
export { MlxDeviceBuffer, deviceBufferOf } from './backend/device-buffer.js';
export { MlxSession, type MlxSessionOptions, type MlxRunOptions, type MlxProgressEvent, type TensorMetadata } from './session.js';
export type { AttentionGradOptions, MixedPrecision, ValueAndGradOptions, ValueAndGradResult } from './grad.js';
export { LossScaler } from './train.js';
export type { LossScalerOptions, TrainStepOptions, TrainStepResult } from './train.js';
export type { SaveModelOptions } from './save-model.js';
export { generate, type GenerateOptions, type SamplingOptions } from './generate.js';
export { PrefixCache, type PrefixCacheOptions } from './prefix-cache.js';
export { LoraAdapters, type LoraOptions, type LoraStepOptions } from './lora.js';
export { generateSpeculative, type SpeculativeOptions, type DraftOptions } from './generate-speculative.js';
export { generateBatch, type GenerateBatchOptions, type BatchStep } from './generate-batch.js';
export { generateSeq2Seq, type Seq2SeqOptions } from './generate-seq2seq.js';
export {
  createGenerator,
  BatchGenerator,
  type BatchGeneratorOptions,
  type BatchGeneratorStats,
  type SubmitOptions,
  type TokenStream,
} from './generate-serve.js';
export {
  type WhisperChunk,
  type WhisperGenerationConfig,
  type WhisperOptions,
  whisperChunks,
  whisperLogitsProcessor,
  whisperPrompt,
} from './whisper.js';
export { transferStats, type TransferStats } from './runtime/convert.js';
export {
  OrtMlxError,
  OnnxLoadError,
  UnsupportedOperatorError,
  NodeExecutionError,
  InvalidFeedError,
  ResourceLimitError,
  RunTerminatedError,
  RefusedNodeError,
  NotDifferentiableError,
  UnknownParameterError,
  ParameterMismatchError,
  type UnsupportedNode,
} from './errors.js';
export { OnnxDataType, type HostTensor, type HostData, type TypedArray } from './onnx/ir.js';
export type { Value, KvReserve, MapValue } from './runtime/value.js';
