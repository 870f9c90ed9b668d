// Tiny integer, bool and float32 steps of a static program (capture.cpp's executor) computed by the executor itself
// (static_tiny.cpp): a decode step's seqlens, positions and bound checks are a few dozen MLX
// primitives over one to a few hundred integers each, and each primitive's own evaluation (its
// output allocated through the encoder, its task made, dispatched and run) cost 1-2 us where the
// arithmetic is nanoseconds.
#pragma once

#include <cstdint>
#include <vector>

#include "mlx/array.h"
#include "mlx/primitives.h"

namespace mlxc {

enum class TinyOp : uint8_t {
  none,
  add,
  subtract,
  multiply,
  maximum,
  minimum,
  less,
  less_equal,
  greater,
  greater_equal,
  equal,
  not_equal,
  logical_and,
  logical_or,
  logical_not,
  negative,
  select,
  as_type,
  copy,  // Reshape, Squeeze, ExpandDims, Broadcast: the input's elements in the output's shape
  concatenate,
  reduce_sum,
  reduce_max,
  reduce_min,
  reduce_and,
  reduce_or,
};

/** How the executor computes a step itself; op none: by the primitive's own eval_cpu. */
struct TinyStep {
  TinyOp op = TinyOp::none;
  int axis = 0;           // concatenate
  std::vector<int> axes;  // reductions
};

/**
 * The tiny form of primitive `p` over `inputs` (the trace's arrays: shapes and dtypes) making
 * outputs of `shapes` and `dtypes`: op none unless it is one of the ops above with one output,
 * every array of at most kTinyElements elements (none empty) and of an integer type of at most 32
 * bits unsigned or 64 bits signed, bool, or float32 (not for reductions). Integers are computed in
 * int64, where they are exact, and wrapped to the output type as the typed C++ arithmetic of MLX's
 * kernels wraps; float32 as MLX's scalar kernels compute it (one correctly rounded operation each,
 * its comparisons and NaN rules, static_cast conversions).
 */
TinyStep tiny_step(const mlx::core::Primitive& p, const std::vector<mlx::core::array>& inputs, const std::vector<mlx::core::Shape>& shapes,
                   const std::vector<mlx::core::Dtype>& dtypes);

/** Computes a tiny step into outs[0] (its data allocated here, row-contiguous) from `ins` (computed; any strides). */
void tiny_eval(const TinyStep& t, const std::vector<mlx::core::array>& ins, std::vector<mlx::core::array>& outs);

/** The largest array a tiny step reads or makes. */
constexpr size_t kTinyElements = 1024;
/**
 * The most elements of a float32 array in a tiny step: its values are gathered one by one (a strided
 * input indexed per element), which on 512 elements cost 8-14 us against MLX's ~1-2 us kernel
 * (llama-tiny's rotary embedding: 0.29 ms a run against 0.096 without float32 tiny steps that size).
 */
constexpr size_t kTinyFloatElements = 64;

}  // namespace mlxc
