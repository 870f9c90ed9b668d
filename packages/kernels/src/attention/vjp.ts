// attentionVjp: dq, dk, dv of scaled-dot-product attention by one of three strategies, chosen
// from a workspace budget unless told: dense (probabilities materialised once), tiled (blocks of
// queries and keys within the budget), or autodiff (MLX's own VJP of the composite forward).
import { dispose, vjp } from '@mlx/core';
import { AttentionVjpBudget, maskGradientElements, type AttentionBlockSizes } from './budget.js';
import {
  attentionConfig,
  attentionShape,
  DEFAULT_WORKSPACE_BYTES,
  type AttentionConfig,
  type AttentionOptions,
  type AttentionVjpStrategy,
} from './config.js';
import { attentionComposite } from './forward.js';
import { attentionVjpDense, hasAdditiveMask } from './vjp-dense.js';
import { attentionVjpTiled } from './vjp-tiled.js';
import type { AttentionGradients, AttentionVjpInputs } from './vjp-types.js';

export interface AttentionVjpRunOptions {
  /** Bytes the pullback may allocate beyond its inputs, outputs included (default 512 MiB). */
  workspaceBytes?: number;
  /** 'auto' (default): dense when its score buffers fit in the workspace, tiled otherwise. */
  strategy?: AttentionVjpStrategy;
  /** Block sizes for the tiled strategy (default: the largest that fit the workspace). */
  blocks?: AttentionBlockSizes;
}

/** The forward's options that the pullback depends on (the mask travels with the inputs). */
export type AttentionVjpConfig = Pick<AttentionOptions, 'scale' | 'causal' | 'causalOffset' | 'softcap'>;

/** MLX's own VJP of the composite forward: the reference the other strategies are tested against. */
export function attentionVjpAutodiff(inputs: AttentionVjpInputs, config: AttentionConfig): AttentionGradients {
  const mask = inputs.mask ?? null;
  if (hasAdditiveMask(mask)) {
    const [outs, [dq, dk, dv, dmask]] = vjp(
      (q, k, v, m) => attentionComposite(q, k, v, m, config),
      [inputs.q, inputs.k, inputs.v, mask],
      [inputs.gradOut],
    );
    dispose(outs);
    return { dq, dk, dv, dmask };
  }
  const [outs, [dq, dk, dv]] = vjp(
    (q, k, v) => attentionComposite(q, k, v, mask, config),
    [inputs.q, inputs.k, inputs.v],
    [inputs.gradOut],
  );
  dispose(outs);
  return { dq, dk, dv };
}

/** The strategy `run` selects for a resolved config ('auto' resolved from the budget). */
export function strategyFor(
  inputs: AttentionVjpInputs,
  config: AttentionConfig,
  run: AttentionVjpRunOptions = {},
): Exclude<AttentionVjpStrategy, 'auto'> {
  const strategy = run.strategy ?? 'auto';
  if (strategy !== 'auto') return strategy;
  const budget = new AttentionVjpBudget(
    run.workspaceBytes ?? DEFAULT_WORKSPACE_BYTES,
    attentionShape(inputs.q, inputs.k, inputs.v),
    config,
    maskGradientElements(inputs.mask),
  );
  return budget.strategy;
}

/** Which strategy attentionVjp would run for these inputs, options and run options. */
export function chooseAttentionVjpStrategy(
  inputs: AttentionVjpInputs,
  config: AttentionVjpConfig = {},
  run: AttentionVjpRunOptions = {},
): Exclude<AttentionVjpStrategy, 'auto'> {
  return strategyFor(inputs, attentionConfig({ ...config, mask: inputs.mask ?? null }), run);
}

/** attentionVjp with an already resolved config (what the registered custom VJP calls). */
export function attentionVjpResolved(
  inputs: AttentionVjpInputs,
  config: AttentionConfig,
  run: AttentionVjpRunOptions = {},
): AttentionGradients {
  const strategy = strategyFor(inputs, config, run);
  if (strategy === 'autodiff') return attentionVjpAutodiff(inputs, config);
  if (strategy === 'dense') return attentionVjpDense(inputs, config);
  const shape = attentionShape(inputs.q, inputs.k, inputs.v);
  const blocks =
    run.blocks ??
    new AttentionVjpBudget(run.workspaceBytes ?? DEFAULT_WORKSPACE_BYTES, shape, config, maskGradientElements(inputs.mask)).tiledBlocks();
  return attentionVjpTiled(inputs, config, blocks);
}

/**
 * The pullback of scaledDotProductAttention: given the forward's inputs, its output (optional)
 * and the output's cotangent, returns { dq, dk, dv }, and dmask for an additive (float) mask (a
 * boolean mask has no cotangent). Only the gradients escape; every intermediate is released as
 * soon as it is consumed.
 */
export function attentionVjp(
  inputs: AttentionVjpInputs,
  config: AttentionVjpConfig = {},
  run: AttentionVjpRunOptions = {},
): AttentionGradients {
  return attentionVjpResolved(inputs, attentionConfig({ ...config, mask: inputs.mask ?? null }), run);
}
