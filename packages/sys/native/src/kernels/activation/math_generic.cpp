// The portable kernels of math_impl.h (one float at a time; the compiler may vectorize them for the
// baseline ISA), and the dispatch to the widest build the running CPU has: AVX-512F, else AVX2+FMA
// on x86-64; NEON on AArch64.
// MLXC_CPU_KERNELS=avx2 stops at AVX2 and =generic takes the portable build (tests run each).
#include <cstddef>
#include <cstdlib>
#include <string>

#include "kernels/activation/math.h"
#include "kernels/common/cpu.h"

#define MLXC_MATH_NS mlxc_math_generic
#include "kernels/activation/math_impl.h"

#if defined(__x86_64__)
#define MLXC_HAVE_AVX2_BUILD 1
namespace mlxc::cpu::avx2 {
void hard_sigmoid_rows(const float* x, float* out, size_t n, float a, float b, bool swish);
void activation_rows(const float* in, const float* bias, float* out, size_t n, size_t c, int act);
void activation_block(float* c, size_t ld, size_t rows, size_t cols, int act);
void softmax_row(const float* in, float* out, size_t n, bool log);
void layer_norm_row(const float* in, const float* w, const float* b, float* out, size_t n, float eps);
void rms_norm_row(const float* in, const float* w, float* out, size_t n, float eps);
}  // namespace mlxc::cpu::avx2
namespace mlxc::cpu::avx512 {
void hard_sigmoid_rows(const float* x, float* out, size_t n, float a, float b, bool swish);
void activation_rows(const float* in, const float* bias, float* out, size_t n, size_t c, int act);
void activation_block(float* c, size_t ld, size_t rows, size_t cols, int act);
void softmax_row(const float* in, float* out, size_t n, bool log);
void layer_norm_row(const float* in, const float* w, const float* b, float* out, size_t n, float eps);
void rms_norm_row(const float* in, const float* w, float* out, size_t n, float eps);
}  // namespace mlxc::cpu::avx512
#endif

#if defined(__aarch64__) && defined(__ARM_NEON)
#define MLXC_HAVE_NEON_BUILD 1
namespace mlxc::cpu::neon {
void hard_sigmoid_rows(const float* x, float* out, size_t n, float a, float b, bool swish);
void activation_rows(const float* in, const float* bias, float* out, size_t n, size_t c, int act);
void activation_block(float* c, size_t ld, size_t rows, size_t cols, int act);
void softmax_row(const float* in, float* out, size_t n, bool log);
void layer_norm_row(const float* in, const float* w, const float* b, float* out, size_t n, float eps);
void rms_norm_row(const float* in, const float* w, float* out, size_t n, float eps);
}  // namespace mlxc::cpu::neon
#endif

namespace mlxc::cpu {

using G = mlxc_math_generic::S;

bool has_avx2() {
#ifdef MLXC_HAVE_AVX2_BUILD
  // MLXC_CPU_KERNELS=generic forces the portable path (tests run both).
  static const bool yes = [] {
    if (cpu_kernels_env() == "generic") return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return yes;
#else
  return false;
#endif
}

bool avx2_build() { return has_avx2() && !has_avx512(); }

/** Whether the NEON build runs (AArch64, unless MLXC_CPU_KERNELS=generic). */
static bool use_neon() {
#ifdef MLXC_HAVE_NEON_BUILD
  static const bool yes = [] { return cpu_kernels_env() != "generic"; }();
  return yes;
#else
  return false;
#endif
}

bool has_avx512() {
#ifdef MLXC_HAVE_AVX2_BUILD
  static const bool yes = [] {
    const std::string& e = cpu_kernels_env();
    if (e == "generic" || e == "avx2") return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  }();
  return yes;
#else
  return false;
#endif
}

void activation_rows(const float* in, const float* bias, float* out, size_t n, size_t c, Act act) {
#ifdef MLXC_HAVE_NEON_BUILD
  if (use_neon()) return neon::activation_rows(in, bias, out, n, c, static_cast<int>(act));
#endif
#ifdef MLXC_HAVE_AVX2_BUILD
  if (has_avx512()) return avx512::activation_rows(in, bias, out, n, c, static_cast<int>(act));
  if (has_avx2()) return avx2::activation_rows(in, bias, out, n, c, static_cast<int>(act));
#endif
  mlxc_math_generic::act_rows<G>(in, bias, out, n, c, static_cast<int>(act));
}

void activation_block(float* c, size_t ld, size_t rows, size_t cols, Act act) {
  if (act == Act::identity || rows == 0 || cols == 0) return;
#ifdef MLXC_HAVE_NEON_BUILD
  if (use_neon()) return neon::activation_block(c, ld, rows, cols, static_cast<int>(act));
#endif
#ifdef MLXC_HAVE_AVX2_BUILD
  if (has_avx512()) return avx512::activation_block(c, ld, rows, cols, static_cast<int>(act));
  if (has_avx2()) return avx2::activation_block(c, ld, rows, cols, static_cast<int>(act));
#endif
  mlxc_math_generic::act_block<G>(c, ld, rows, cols, static_cast<int>(act));
}

void hard_sigmoid_rows(const float* x, float* out, size_t n, float a, float b, bool swish) {
#ifdef MLXC_HAVE_NEON_BUILD
  if (use_neon()) return neon::hard_sigmoid_rows(x, out, n, a, b, swish);
#endif
#ifdef MLXC_HAVE_AVX2_BUILD
  if (has_avx512()) return avx512::hard_sigmoid_rows(x, out, n, a, b, swish);
  if (has_avx2()) return avx2::hard_sigmoid_rows(x, out, n, a, b, swish);
#endif
  mlxc_math_generic::hard_sigmoid_span<G>(x, out, n, a, b, swish);
}

void softmax_row(const float* in, float* out, size_t n, bool log) {
#ifdef MLXC_HAVE_NEON_BUILD
  if (use_neon()) return neon::softmax_row(in, out, n, log);
#endif
#ifdef MLXC_HAVE_AVX2_BUILD
  if (has_avx512()) return avx512::softmax_row(in, out, n, log);
  if (has_avx2()) return avx2::softmax_row(in, out, n, log);
#endif
  mlxc_math_generic::softmax_row<G>(in, out, n, log);
}

void layer_norm_row(const float* in, const float* w, const float* b, float* out, size_t n, float eps) {
#ifdef MLXC_HAVE_NEON_BUILD
  if (use_neon()) return neon::layer_norm_row(in, w, b, out, n, eps);
#endif
#ifdef MLXC_HAVE_AVX2_BUILD
  if (has_avx512()) return avx512::layer_norm_row(in, w, b, out, n, eps);
  if (has_avx2()) return avx2::layer_norm_row(in, w, b, out, n, eps);
#endif
  mlxc_math_generic::layer_norm_row<G>(in, w, b, out, n, eps);
}

void rms_norm_row(const float* in, const float* w, float* out, size_t n, float eps) {
#ifdef MLXC_HAVE_NEON_BUILD
  if (use_neon()) return neon::rms_norm_row(in, w, out, n, eps);
#endif
#ifdef MLXC_HAVE_AVX2_BUILD
  if (has_avx512()) return avx512::rms_norm_row(in, w, out, n, eps);
  if (has_avx2()) return avx2::rms_norm_row(in, w, out, n, eps);
#endif
  mlxc_math_generic::rms_norm_row<G>(in, w, out, n, eps);
}

}  // namespace mlxc::cpu
