// The vectorized float math of the activation and normalisation kernels: math_impl.h written once
// over a vector type and built per instruction set (math_generic.cpp, math_avx2.cpp,
// math_avx512.cpp, math_neon.cpp); math_generic.cpp dispatches to the widest build the running
// CPU has. The activations are the building blocks of the row kernels (softmax's exp), so both
// live here; norm/ calls the row kernels.
#pragma once

#include <cstddef>

namespace mlxc::cpu {

// Vector math over n contiguous floats.
enum class Act { exp, erf, tanh, sigmoid, relu, silu, gelu, gelu_tanh, identity };
/** out[i] = act(in[i] + (bias ? bias[i % c] : 0)), n a multiple of c when bias is given. */
void activation_rows(const float* in, const float* bias, float* out, size_t n, size_t c, Act act);
/** act in place over rows x cols floats of a matrix, rows ld apart (a product's epilogue); identity: nothing. */
void activation_block(float* c, size_t ld, size_t rows, size_t cols, Act act);
/** out[i] = clamp(x[i] * a + b, 0, 1) (HardSigmoid), times x[i] when swish (HardSwish); out may be x. */
void hard_sigmoid_rows(const float* x, float* out, size_t n, float a, float b, bool swish);
/** One row each: softmax, log-softmax, layer norm, rms norm (weight/bias may be null). */
void softmax_row(const float* in, float* out, size_t n, bool log);
void layer_norm_row(const float* in, const float* w, const float* b, float* out, size_t n, float eps);
void rms_norm_row(const float* in, const float* w, float* out, size_t n, float eps);

}  // namespace mlxc::cpu
