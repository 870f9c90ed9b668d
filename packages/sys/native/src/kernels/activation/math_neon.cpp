// The kernels of math_impl.h on AArch64 NEON (4 floats). Every AArch64 CPU has NEON, so
// math_generic.cpp calls this build there without a run-time check (MLXC_CPU_KERNELS=generic still
// takes the portable loops). min/max follow the x86 builds' rule (the second operand when either is
// NaN) rather than NEON's own NaN-propagating vminq/vmaxq, so that every build computes the same.
#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>

#define MLXC_MATH_NS mlxc_math_neon
#include "kernels/activation/math_impl.h"

namespace mlxc_math_neon {

struct V4 {
  float32x4_t v;
  using M = uint32x4_t;
  static constexpr size_t W = 4;
  static V4 load(const float* p) { return {vld1q_f32(p)}; }
  static void store(float* p, V4 a) { vst1q_f32(p, a.v); }
  static V4 splat(float f) { return {vdupq_n_f32(f)}; }
  friend V4 operator+(V4 a, V4 b) { return {vaddq_f32(a.v, b.v)}; }
  friend V4 operator-(V4 a, V4 b) { return {vsubq_f32(a.v, b.v)}; }
  friend V4 operator*(V4 a, V4 b) { return {vmulq_f32(a.v, b.v)}; }
  friend V4 operator/(V4 a, V4 b) { return {vdivq_f32(a.v, b.v)}; }
  static V4 fma(V4 a, V4 b, V4 c) { return {vfmaq_f32(c.v, a.v, b.v)}; }
  static V4 min(V4 a, V4 b) { return {vbslq_f32(vcltq_f32(a.v, b.v), a.v, b.v)}; }
  static V4 max(V4 a, V4 b) { return {vbslq_f32(vcgtq_f32(a.v, b.v), a.v, b.v)}; }
  static V4 abs(V4 a) { return {vabsq_f32(a.v)}; }
  static V4 copysign(V4 mag, V4 sign) { return {vbslq_f32(vdupq_n_u32(0x80000000u), sign.v, mag.v)}; }
  static M lt(V4 a, V4 b) { return vcltq_f32(a.v, b.v); }
  static M gt(V4 a, V4 b) { return vcgtq_f32(a.v, b.v); }
  static M isnan(V4 a) { return vmvnq_u32(vceqq_f32(a.v, a.v)); }
  static M isinf(V4 a) { return vceqq_f32(vabsq_f32(a.v), vdupq_n_f32(__builtin_inff())); }
  static M mor(M a, M b) { return vorrq_u32(a, b); }
  static bool any(M m) { return vmaxvq_u32(m) != 0; }
  static V4 select(M m, V4 a, V4 b) { return {vbslq_f32(m, a.v, b.v)}; }
  static V4 round(V4 a) { return {vrndnq_f32(a.v)}; }
  static V4 pow2(V4 n) {
    int32x4_t i = vaddq_s32(vcvtnq_s32_f32(n.v), vdupq_n_s32(127));
    return {vreinterpretq_f32_s32(vshlq_n_s32(i, 23))};
  }
  static float hsum(V4 a) { return vaddvq_f32(a.v); }
  static float hmax(V4 a) { return vmaxvq_f32(a.v); }
};

}  // namespace mlxc_math_neon

namespace mlxc::cpu::neon {
using V = mlxc_math_neon::V4;
void hard_sigmoid_rows(const float* x, float* out, size_t n, float a, float b, bool swish) {
  mlxc_math_neon::hard_sigmoid_span<V>(x, out, n, a, b, swish);
}
void activation_rows(const float* in, const float* bias, float* out, size_t n, size_t c, int act) {
  mlxc_math_neon::act_rows<V>(in, bias, out, n, c, act);
}
void activation_block(float* c, size_t ld, size_t rows, size_t cols, int act) { mlxc_math_neon::act_block<V>(c, ld, rows, cols, act); }
void softmax_row(const float* in, float* out, size_t n, bool log) { mlxc_math_neon::softmax_row<V>(in, out, n, log); }
void layer_norm_row(const float* in, const float* w, const float* b, float* out, size_t n, float eps) {
  mlxc_math_neon::layer_norm_row<V>(in, w, b, out, n, eps);
}
void rms_norm_row(const float* in, const float* w, float* out, size_t n, float eps) { mlxc_math_neon::rms_norm_row<V>(in, w, out, n, eps); }
}  // namespace mlxc::cpu::neon
#endif
