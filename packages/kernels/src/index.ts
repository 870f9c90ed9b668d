// @mlx/kernels: composite MLX ops with their gradients.
export {
  scaledDotProductAttention,
} from './attention/attention.js';
export {
  attentionVjp, attentionVjpAutodiff, chooseAttentionVjpStrategy, type AttentionVjpConfig, type AttentionVjpRunOptions,
} from './attention/vjp.js';
export { attentionVjpDense } from './attention/vjp-dense.js';
export { attentionVjpTiled } from './attention/vjp-tiled.js';
export type { AttentionGradients, AttentionVjpInputs } from './attention/vjp-types.js';
export { AttentionVjpBudget, type AttentionBlockSizes } from './attention/budget.js';
export { attentionComposite, attentionFused } from './attention/forward.js';
export {
  attentionConfig, DEFAULT_WORKSPACE_BYTES, type AttentionConfig, type AttentionImplementation, type AttentionMaskKind,
  type AttentionOptions, type AttentionVjpOptions, type AttentionVjpStrategy,
} from './attention/config.js';
export { broadcastAdjoint, broadcastAxes } from './broadcast.js';
export { disposeCustomVjpCache, customVjpCacheSize } from './custom-vjp.js';
export {
  layerNorm, layerNormVjp, layerNormComposite, rmsNorm, rmsNormVjp, rmsNormComposite,
  type NormOptions, type LayerNormGradients, type RmsNormGradients,
} from './norms.js';
export {
  gelu, geluVjp, geluComposite, silu, siluVjp, siluComposite, swiglu, swigluVjp, swigluComposite, type GeluApproximation,
} from './activations.js';
export {
  rotaryEmbedding, rotaryEmbeddingVjp, rotaryEmbeddingComposite, rotaryCache, type RotaryEmbeddingOptions,
} from './rope.js';
export {
  softmaxCrossEntropy, softmaxCrossEntropyVjp, softmaxCrossEntropyComposite, type SoftmaxCrossEntropyOptions, type LossReduction,
} from './losses.js';
