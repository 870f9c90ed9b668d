// Winograd's F(2x2, 3x3) for the channels-last convolution (conv_gemm.h): a 3x3 window with unit
// strides and dilations, one group. Each 2x2 block of outputs (a tile) reads a 4x4 patch of the
// input; the patch's transform Bᵀ d B and the weight's G g Gᵀ (16 values each) multiply
// elementwise, summed over the input channels, and Aᵀ m A gives the 4 outputs: 16 products of
// [tiles, C] x [C, O] (the convolution's own kernels, as 1x1 windows) do in 16 multiply-adds per
// output channel and input channel the work that the direct product does in 36 (2.25x fewer).
// The transforms are additions and halvings; in exact arithmetic the result is the direct
// product's, in float32 it differs by rounding.
#pragma once

#include <cstddef>

#include "kernels/conv/conv_gemm.h"

namespace mlxc::cpu::winograd {

/** Tiles per side of a length-n output (2 outputs a tile). */
inline size_t tiles_of(size_t n) { return (n + 1) / 2; }

/**
 * Whether F(2x2, 3x3) takes this problem: 2-D, a 3x3 window, unit strides and dilations, one group,
 * at least kMinChannels channels in and out and kMinTiles tiles; MLXC_WINOGRAD=0 turns it off (read
 * once per process). Below kFirstTiles tiles it takes it only where the weight's transform is
 * already kept (`kept`): there reading the transformed weight (16/9 of the weight) costs about
 * what the products save, and transforming it for one evaluation (an eager run's) cost more than
 * the direct product (a 512 -> 512 layer at 7x7, 16 tiles: 2.8 ms against 1.2; 0.75 ms when kept).
 */
bool fits(const convgemm::Shape& s, bool kept);
constexpr size_t kMinChannels = 16;
constexpr size_t kMinTiles = 16;
constexpr size_t kFirstTiles = 32;

/**
 * Whether x[0, n) holds no infinity or NaN. The transforms add and subtract values of a patch (and
 * of a window's weights): where the direct product gives an infinity, the sum of two may be NaN, so
 * non-finite data takes the direct product.
 */
bool all_finite(const float* x, size_t n);

/** Floats of the transformed weight: 16 packed [C, O] matrices in the product's panels, [16][P][C][32]. */
inline size_t weight_floats(const convgemm::Shape& s) { return 16 * s.panels() * s.c * kPanel; }

/** The conv panels wp ([P, 3, 3, C, 32], halves apart where `split`) transformed into u (weight_floats). */
void transform_weight(const convgemm::Shape& s, const float* wp, bool split, float* u);

/** y = clamp(conv(x) + bias + res, lo, hi), channels-last, from the transformed weight u; res may be y itself. */
void run(const convgemm::Shape& s, const float* x, const float* u, const float* bias, const float* res, float* y, float lo, float hi);

}  // namespace mlxc::cpu::winograd
