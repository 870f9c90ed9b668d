// The portable small-M product kernels of small_gemm_impl.h (a plain 8-float struct the compiler
// vectorizes for the baseline ISA), and the dispatch to the AVX-512F build, else the AVX2+FMA one,
// where the running CPU has it (the fused kernels' has_avx512() and has_avx2(), so
// MLXC_CPU_KERNELS=avx2 and MLXC_CPU_KERNELS=generic force those paths too).
#include <cstddef>
#include <cstdint>

#include "kernels/common/cpu.h"
#include "kernels/gemm/small_gemm.h"

#define MLXC_GEMM_NS mlxc_gemm_generic
#include "kernels/gemm/small_gemm_impl.h"

namespace mlxc_gemm_generic {

struct G8 {
  float v[8];
  static constexpr size_t W = 8;
  static G8 load(const float* p) {
    G8 r;
    for (int i = 0; i < 8; i++) r.v[i] = p[i];
    return r;
  }
  static void store(float* p, G8 a) {
    for (int i = 0; i < 8; i++) p[i] = a.v[i];
  }
  static G8 zero() { return splat(0.0f); }
  static G8 splat(float f) {
    G8 r;
    for (int i = 0; i < 8; i++) r.v[i] = f;
    return r;
  }
  static G8 fma(G8 a, G8 b, G8 c) {
    G8 r;
    for (int i = 0; i < 8; i++) r.v[i] = S1::fma(S1{a.v[i]}, S1{b.v[i]}, S1{c.v[i]}).v;
    return r;
  }
  friend G8 operator+(G8 a, G8 b) {
    G8 r;
    for (int i = 0; i < 8; i++) r.v[i] = a.v[i] + b.v[i];
    return r;
  }
  static G8 nibbles(uint32_t w) {
    G8 r;
    for (int i = 0; i < 8; i++) r.v[i] = static_cast<float>((w >> (4 * i)) & 15u);
    return r;
  }
  static G8 bytes(const uint32_t* p) {
    G8 r;
    for (int i = 0; i < 8; i++) r.v[i] = static_cast<float>((p[i / 4] >> (8 * (i % 4))) & 255u);
    return r;
  }
  static float hsum(G8 a) {
    // The same pairing as the AVX2 build: halves, then pairs, then the last two.
    float h[4];
    for (int i = 0; i < 4; i++) h[i] = a.v[i] + a.v[i + 4];
    return (h[0] + h[2]) + (h[1] + h[3]);
  }
};

}  // namespace mlxc_gemm_generic

#if defined(__x86_64__)
#define MLXC_HAVE_AVX2_GEMM 1
namespace mlxc::cpu::gemm_avx2 {
void nk_rows(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K,
             size_t n0, size_t n1);
void kn(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K, size_t n0,
        size_t n1);
void nk(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K, size_t n0,
        size_t n1);
void q4(const float* a, size_t lda, const uint32_t* w, const float* sc, const float* bi, const float* asum, const float* bias, float* out,
        size_t ldo, size_t M, size_t K, size_t group, size_t n0, size_t n1);
void q8(const float* a, size_t lda, const uint32_t* w, const float* sc, const float* bi, const float* asum, const float* bias, float* out,
        size_t ldo, size_t M, size_t K, size_t group, size_t n0, size_t n1);
}  // namespace mlxc::cpu::gemm_avx2
namespace mlxc::cpu::gemm_avx512 {
void kn(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K, size_t n0,
        size_t n1);
void nk(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K, size_t n0,
        size_t n1);
void q4(const float* a, size_t lda, const uint32_t* w, const float* sc, const float* bi, const float* asum, const float* bias, float* out,
        size_t ldo, size_t M, size_t K, size_t group, size_t n0, size_t n1);
void nk_rows(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K,
             size_t n0, size_t n1);
}  // namespace mlxc::cpu::gemm_avx512
#endif

namespace mlxc::cpu::gemm {

using G = mlxc_gemm_generic::G8;

void kn(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K, size_t n0,
        size_t n1) {
#ifdef MLXC_HAVE_AVX2_GEMM
  if (has_avx512()) return gemm_avx512::kn(a, lda, b, ldb, bias, out, ldo, M, K, n0, n1);
  if (has_avx2()) return gemm_avx2::kn(a, lda, b, ldb, bias, out, ldo, M, K, n0, n1);
#endif
  mlxc_gemm_generic::gemm_kn<G>(a, lda, b, ldb, bias, out, ldo, M, K, n0, n1);
}

void nk(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K, size_t n0,
        size_t n1) {
#ifdef MLXC_HAVE_AVX2_GEMM
  if (has_avx512()) return gemm_avx512::nk(a, lda, b, ldb, bias, out, ldo, M, K, n0, n1);
  if (has_avx2()) return gemm_avx2::nk(a, lda, b, ldb, bias, out, ldo, M, K, n0, n1);
#endif
  mlxc_gemm_generic::gemm_nk<G>(a, lda, b, ldb, bias, out, ldo, M, K, n0, n1);
}

void nk_rows(const float* a, size_t lda, const float* b, size_t ldb, const float* bias, float* out, size_t ldo, size_t M, size_t K,
             size_t n0, size_t n1) {
#ifdef MLXC_HAVE_AVX2_GEMM
  if (M <= 4 && has_avx512()) return gemm_avx512::nk_rows(a, lda, b, ldb, bias, out, ldo, M, K, n0, n1);
  if (M <= 4 && has_avx2()) return gemm_avx2::nk_rows(a, lda, b, ldb, bias, out, ldo, M, K, n0, n1);
#endif
  nk(a, lda, b, ldb, bias, out, ldo, M, K, n0, n1);
}

void q4(const float* a, size_t lda, const uint32_t* w, const float* sc, const float* bi, const float* asum, const float* bias, float* out,
        size_t ldo, size_t M, size_t K, size_t group, size_t n0, size_t n1) {
#ifdef MLXC_HAVE_AVX2_GEMM
  if (has_avx512()) return gemm_avx512::q4(a, lda, w, sc, bi, asum, bias, out, ldo, M, K, group, n0, n1);
  if (has_avx2()) return gemm_avx2::q4(a, lda, w, sc, bi, asum, bias, out, ldo, M, K, group, n0, n1);
#endif
  mlxc_gemm_generic::gemm_q4<G>(a, lda, w, sc, bi, asum, bias, out, ldo, M, K, group, n0, n1);
}

void q8(const float* a, size_t lda, const uint32_t* w, const float* sc, const float* bi, const float* asum, const float* bias, float* out,
        size_t ldo, size_t M, size_t K, size_t group, size_t n0, size_t n1) {
#ifdef MLXC_HAVE_AVX2_GEMM
  // An AVX-512 CPU runs the AVX2 build of the 8-bit kernel.
  if (has_avx2() || has_avx512()) return gemm_avx2::q8(a, lda, w, sc, bi, asum, bias, out, ldo, M, K, group, n0, n1);
#endif
  mlxc_gemm_generic::gemm_q4<G, 8>(a, lda, w, sc, bi, asum, bias, out, ldo, M, K, group, n0, n1);
}

}  // namespace mlxc::cpu::gemm
