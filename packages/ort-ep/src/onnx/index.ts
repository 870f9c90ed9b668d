// ONNX model loading: bytes -> ModelIR (host tensors, nodes, graphs, functions), with no MLX in it.
export {
  OnnxDataType,
  dataTypeName,
  dataTypeFromName,
  isKnownDataType,
  elementCount,
  type TypedArray,
  type HostData,
  type HostTensor,
  type SparseTensorIR,
  type AttrValue,
  type AttrType,
  type NodeIR,
  type Dim,
  type TypeIR,
  type ValueInfoIR,
  type GraphIR,
  type FunctionIR,
  type ModelIR,
  type ExternalDataSpec,
} from './ir.js';
export { OnnxLoadError } from '../errors.js';
export {
  bitsPerElement,
  rawByteLength,
  allocHost,
  packSubByte,
  unpackSubByte,
  fromRawBytes,
  toRawBytes,
  lazyTensor,
  heldFloat32s,
  undecodedBytes,
  LAZY_DECODE_BYTES,
} from './layout.js';
export { decodeTensor, decodeTensorBytes, decodeSparseTensor, sparseToDense, type TensorContext } from './tensor.js';
export {
  MODEL_FILE_LIMIT,
  TENSOR_FILE_LIMIT,
  confineLocation,
  fileErrorText,
  materializeExternalData,
  openRegularFile,
  readModelFile,
  readRegularFile,
  readTensorFile,
  type HostBytes,
} from './external.js';
export { decodeModel, decodeGraph, decodeType, normalizeDomain, functionKey, DEFAULT_DOMAIN, type DecodeOptions } from './model.js';
export { expandFunctions } from './functions.js';
export { validateGraph, outerReferences, subgraphsOf } from './validate.js';
export { checkSchemas, schemaOf, knownOpsetRange, typeString, type OpSchema } from './schema.js';
export {
  decodeValueBytes,
  decodeSequenceBytes,
  decodeOptionalBytes,
  decodeMapBytes,
  isHostTensor,
  type DataValue,
  type SequenceValue,
  type OptionalValue,
  type MapValue,
  type SparseValue,
} from './data.js';
export { readTestCase, readTestDataset, type TestCase, type TestDataset, type TestValue } from './testcase.js';
