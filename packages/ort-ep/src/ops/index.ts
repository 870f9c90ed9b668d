// The op table: every family of the default registry, one file each, grouped by ONNX domain.
// A family registers only its own ops; helpers shared by families live in helpers/.
import { OpRegistry } from '../registry/registry.js';
// ai.onnx
import { activationOps } from './activation.js';
import { attentionOps } from './attention.js';
import { bitCastOps } from './bitcast.js';
import { causalConvOps } from './causal-conv.js';
import { constantOps } from './constant.js';
import { controlOps } from './control.js';
import { convOps } from './conv.js';
import { deformConvOps } from './deform-conv.js';
import { elementwiseOps } from './elementwise.js';
import { flexAttentionOps } from './flex-attention.js';
import { geometryOps } from './geometry.js';
import { gridSampleOps } from './grid-sample.js';
import { imageDecoderOps } from './image-decoder.js';
import { indexingOps } from './indexing.js';
import { layoutOps } from './layout.js';
import { linearAttentionOps } from './linear-attention.js';
import { lossOps } from './loss.js';
import { matmulOps } from './matmul.js';
import { normOps } from './norm.js';
import { poolOps } from './pool.js';
import { quantOps } from './quant.js';
import { randomOps } from './random.js';
import { reduceOps } from './reduce.js';
import { resizeOps } from './resize.js';
import { rnnOps } from './rnn.js';
import { roiOps } from './roi.js';
import { sequenceOps } from './sequence.js';
import { shapeOps } from './shape.js';
import { signalOps } from './signal.js';
import { sortOps } from './sort.js';
import { stringsOps } from './strings.js';
import { tfIdfOps } from './tfidf.js';
// com.microsoft (onnxruntime's contrib ops; norm.ts also holds the two it registers in ai.onnx)
import { msAttentionOps } from './com.microsoft/attention.js';
import { dynamicQuantizeLstmOps } from './com.microsoft/dynamic-quantize-lstm.js';
import { fpWeightOps } from './com.microsoft/fp-weights.js';
import { fusedOps } from './com.microsoft/fused.js';
import { gatherBlockQuantizedOps } from './com.microsoft/gather-block-quantized.js';
import { msMultiHeadAttentionOps } from './com.microsoft/multi-head-attention.js';
import { matMulNBitsOps } from './com.microsoft/nbits.js';
import { pagedAttentionOps } from './com.microsoft/paged-attention.js';
import { qmoeOps } from './com.microsoft/qmoe.js';
import { quantMatMulOps } from './com.microsoft/quant-matmul.js';
import { msNormOps } from './com.microsoft/norm.js';
import { msRotaryOps } from './com.microsoft/rotary.js';
// ai.onnx.ml
import { linearOps } from './ai.onnx.ml/linear.js';
import { mapOps } from './ai.onnx.ml/maps.js';
import { mlOps } from './ai.onnx.ml/ml.js';
import { preprocessOps } from './ai.onnx.ml/preprocess.js';
import { svmOps } from './ai.onnx.ml/svm.js';
import { treeClassicOps } from './ai.onnx.ml/tree-classic.js';
import { treeEnsembleOps } from './ai.onnx.ml/tree-ensemble.js';
// mlx.fused (produced by plan-time rewrites only)
import { mlxFusedOps } from './mlx/fused.js';
// ai.onnx.preview.training
import { trainingOps } from './training/optimizers.js';

export const opFamilies = {
  activation: activationOps,
  attention: attentionOps,
  bitcast: bitCastOps,
  'causal-conv': causalConvOps,
  constant: constantOps,
  control: controlOps,
  conv: convOps,
  'deform-conv': deformConvOps,
  elementwise: elementwiseOps,
  'flex-attention': flexAttentionOps,
  geometry: geometryOps,
  'grid-sample': gridSampleOps,
  'image-decoder': imageDecoderOps,
  indexing: indexingOps,
  layout: layoutOps,
  'linear-attention': linearAttentionOps,
  loss: lossOps,
  matmul: matmulOps,
  norm: normOps,
  pool: poolOps,
  quant: quantOps,
  random: randomOps,
  reduce: reduceOps,
  resize: resizeOps,
  rnn: rnnOps,
  roi: roiOps,
  sequence: sequenceOps,
  shape: shapeOps,
  signal: signalOps,
  sort: sortOps,
  strings: stringsOps,
  tfidf: tfIdfOps,
  'com.microsoft/attention': msAttentionOps,
  'com.microsoft/dynamic-quantize-lstm': dynamicQuantizeLstmOps,
  'com.microsoft/fp-weights': fpWeightOps,
  'com.microsoft/fused': fusedOps,
  'com.microsoft/gather-block-quantized': gatherBlockQuantizedOps,
  'com.microsoft/multi-head-attention': msMultiHeadAttentionOps,
  'com.microsoft/nbits': matMulNBitsOps,
  'com.microsoft/paged-attention': pagedAttentionOps,
  'com.microsoft/qmoe': qmoeOps,
  'com.microsoft/quant-matmul': quantMatMulOps,
  'com.microsoft/norm': msNormOps,
  'com.microsoft/rotary': msRotaryOps,
  'ai.onnx.ml/linear': linearOps,
  'ai.onnx.ml/maps': mapOps,
  'ai.onnx.ml/ml': mlOps,
  'ai.onnx.ml/preprocess': preprocessOps,
  'ai.onnx.ml/svm': svmOps,
  'ai.onnx.ml/tree-classic': treeClassicOps,
  'ai.onnx.ml/tree-ensemble': treeEnsembleOps,
  'training/optimizers': trainingOps,
  'mlx/fused': mlxFusedOps,
};

export const defaultRegistry = new OpRegistry();
for (const [family, entries] of Object.entries(opFamilies)) defaultRegistry.addFamily(family, entries);
