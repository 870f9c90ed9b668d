// @mlx/kernels: composite MLX ops with their gradients. Every differentiable kernel registers its
// own pullback as MLX's custom VJP; the *Vjp functions expose the same pullbacks directly, and the
// *Composite functions are the plain-op references that MLX's autodiff differentiates in tests.
export { scaledDotProductAttention } from './attention/attention.js';
export { attentionVjp, chooseAttentionVjpStrategy, type AttentionVjpConfig, type AttentionVjpRunOptions } from './attention/vjp.js';
export type { AttentionGradients, AttentionVjpInputs } from './attention/vjp-types.js';
export { AttentionVjpBudget, type AttentionBlockSizes } from './attention/budget.js';
export {
  DEFAULT_WORKSPACE_BYTES,
  type AttentionConfig,
  type AttentionImplementation,
  type AttentionMaskKind,
  type AttentionOptions,
  type AttentionShape,
  type AttentionVjpOptions,
  type AttentionVjpStrategy,
} from './attention/config.js';
export { broadcastAdjoint, broadcastAxes } from './broadcast.js';
export { fromHeads, toHeads } from './heads.js';
export { disposeCustomVjpCache, customVjpCacheSize } from './custom-vjp.js';
export {
  layerNorm,
  layerNormVjp,
  layerNormComposite,
  layerNormWithStats,
  rmsNorm,
  rmsNormVjp,
  rmsNormComposite,
  rmsNormWithStats,
  type NormImplementation,
  type NormOptions,
  type NormStatsOptions,
  type LayerNormGradients,
  type LayerNormStats,
  type RmsNormGradients,
  type RmsNormStats,
} from './norms.js';
export {
  gelu,
  geluVjp,
  geluComposite,
  silu,
  siluVjp,
  siluComposite,
  swiglu,
  swigluVjp,
  swigluComposite,
  type ActivationImplementation,
  type GeluApproximation,
  type GeluOptions,
  type SiluOptions,
  type SwigluOptions,
} from './activations.js';
export { softmax, logSoftmax, type SoftmaxOptions } from './softmax.js';
export {
  rotaryEmbedding,
  rotaryEmbeddingVjp,
  rotaryEmbeddingComposite,
  rotaryCache,
  rotaryFactors,
  type RotaryEmbeddingOptions,
  type RotaryFactors,
  type RotaryFactorsOptions,
  type RotarySpan,
} from './rope.js';
export {
  softmaxCrossEntropy,
  softmaxCrossEntropyVjp,
  softmaxCrossEntropyComposite,
  nllLoss,
  type NllLossOptions,
  type SoftmaxCrossEntropyOptions,
  type LossReduction,
} from './losses.js';
