// Channels-last max pooling on the CPU (spec/conv.ts), the pool between channels-last
// convolutions (ResNet's stem): MLX composes it from a padded copy of the input and one strided
// slice per window tap folded with maximum, each pass over the whole result; here one pass reads
// each output position's window taps, C contiguous floats each, on the thread pool.
#pragma once

#include <vector>

#include "mlx/mlx.h"

namespace mlxc::cpu {

namespace mx = mlx::core;

/** The max of each window of x [N, ...spatial, C] (1 or 2 spatial axes natively, float32 on the
 * CPU): kernel, strides, pads (begin and end: the padding never wins, NaN propagates) and
 * dilations per spatial axis; [N, ...out, C] with out = (in + begin + end - span) / stride + 1.
 * Elsewhere MLX's pad, strided slices and maximum, with the same result. */
mx::array max_pool_channels_last(const mx::array& x, const std::vector<int>& kernel, const std::vector<int>& strides,
                                 const std::vector<int>& pads_begin, const std::vector<int>& pads_end, const std::vector<int>& dilations,
                                 mx::Stream s);

}  // namespace mlxc::cpu
