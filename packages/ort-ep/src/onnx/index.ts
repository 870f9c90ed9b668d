export * from './ir.js';
export { decodeTensor, decodeTensorBytes, type TensorContext } from './tensor.js';
export { decodeModel, decodeGraph, DEFAULT_DOMAIN, type DecodeOptions } from './model.js';
export { expandFunctions } from './functions.js';
export { validateGraph } from './validate.js';
export { readTestCase, type TestCase, type TestValue } from './testcase.js';
