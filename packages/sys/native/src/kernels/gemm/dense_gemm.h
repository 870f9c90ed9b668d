// Matrix products by a constant weight packed once into panels (spec/kernels/gemm.ts): the
// Linear layers of transformers and MLPs, at every row count. MLX's CPU matmul hands OpenBLAS an
// sgemm that packs the weight on every call (a tenth of BERT-base's run), and the small-row
// kernels read a [K, N] weight row by row, K short runs a pass that the prefetchers retrain on.
// Here the weight is laid out once as [ceil(N / 32), K, 32]: 32 output columns side by side for
// each k, zeros past N, each panel one contiguous run. Few rows (decoding; up to 4, 8 in the AVX2
// build) stream the panels once, every row's products at each k together; more rows are packed in
// tiles of 12 rows (each k's 12 values together) and multiplied by the panels with a 12 x 32
// register tile, K in blocks that keep a panel's block in L1, the bias added in the last block's store. Threads split the panels (and
// the row blocks when there are many rows). AVX-512 where the CPU has it, else AVX2+FMA, else a
// portable loop; other devices, dtypes and MLXC_CPU_KERNELS=off get MLX's matmul on the unpacked weight.
#pragma once

#include <cstddef>
#include <optional>

#include "kernels/activation/math.h"
#include "mlx/mlx.h"

namespace mlxc::cpu {

namespace mx = mlx::core;

/**
 * w [K, N] -> [ceil(N / 32), K, 32], zeros past N: the weight layout of dense_gemm. In the AVX2
 * build (avx2_build(), cpu.h) each panel's data is its first 16 columns' [K, 16], then the other
 * 16's, under the same shape (its 6 x 16 kernel streams a half panel's rows 64 bytes apart rather
 * than every other line of 128-byte rows): the layout is the kernels' own, made and read by this
 * library only.
 */
mx::array dense_pack_weight(const mx::array& w, mx::Stream s);

/**
 * dense_pack_weight of a float32 [k, n] matrix in host memory into dst ([ceil(n / 32), k, 32] floats),
 * on the kernel pool's threads. src is little-endian float32 bytes at any alignment (a weight's raw
 * bytes in a model file); dst's pages are populated first (populate_host).
 */
void dense_pack_host(float* dst, const void* src, size_t k, size_t n);
/** src [k, n] -> dst [n, k], elements of elem_size bytes (2 or 4), threaded over tiles of rows of dst. */
void transpose_host(void* dst, const void* src, size_t k, size_t n, size_t elem_size);

/** x [..., K] @ w + bias, with wp = dense_pack_weight(w) of a [K, n] weight and bias [n] (or none): [..., n]. */
mx::array dense_gemm(const mx::array& x, const mx::array& wp, int n, const std::optional<mx::array>& bias, mx::Stream s);
/**
 * dense_gemm, then the fused activation `kind` (as mlxc_fused_activation names them: gelu, gelu_tanh,
 * relu, silu, ...) on each result, then `residual` added (a transformer's skip connection): the
 * kernel applies both to each block of the output as it finishes (still in cache) rather than in
 * passes of their own. A residual of another shape than the result's (it broadcasts) or type is
 * added by MLX's add after the product, as off the native path.
 */
mx::array dense_gemm_act(const mx::array& x, const mx::array& wp, int n, const std::optional<mx::array>& bias, const std::string& kind,
                         const std::optional<mx::array>& residual, mx::Stream s);

namespace dense {
/** Output columns per panel, rows per register tile. */
constexpr int kPanel = 32;
constexpr int kTile = 12;
/**
 * K per block of the AVX-512 tile kernel, split evenly (pass_depth): long blocks, as in the AVX2
 * build. On Zen 4 (512-bit operations on 256-bit units, 1 MiB of L2) BERT-base's products ran at
 * ~96 GFLOP/s a core in blocks of 256 (a panel's block kept in L1) and ~104 in one block of 768.
 */
constexpr int kDepthAvx512 = 1024;
/**
 * K per block of the AVX2 tile kernel: long blocks. Each 6 x 16 kernel call streams its half panel
 * and its rows' block front to back (the prefetchers keep up from L2/L3), and every block costs a
 * reload of the sums and a restart of their chains: on Zen 3, [128, 768] x [768, 3072] ran at
 * ~84 GFLOP/s a core in blocks of 256 and ~89 in one block of 768.
 */
constexpr int kDepthAvx2 = 1024;
/** Rows up to which the panels are streamed once with every row at each k (no packing of x). */
constexpr int kFewRows = 4;
/** The same in the AVX2 build, whose one-pass kernels take up to 7 rows (8 in two passes of 4). */
constexpr int kFewRowsAvx2 = 8;

/** One problem: x rows [M, K] with row stride lda, panels [P, K, 32], out [M, n] with row stride n. */
struct Problem {
  const float* x;
  size_t lda;
  const float* wp;
  const float* bias;
  float* out;
  size_t M, K, n, P;
  /** Applied to each block of out once its last block of K is stored (identity: none). */
  Act act = Act::identity;
  /** Added to each block of out after act: [M, n] in row order, or null. */
  const float* residual = nullptr;
};

/** The epilogue of out's rows [row, row + rows) x columns [col, col + cols), once complete: act, then the residual. */
inline void epilogue(const Problem& p, size_t row, size_t col, size_t rows, size_t cols) {
  activation_block(p.out + row * p.n + col, p.n, rows, cols, p.act);
  if (!p.residual) return;
  for (size_t r = row; r < row + rows; r++) {
    float* o = p.out + r * p.n + col;
    const float* q = p.residual + r * p.n + col;
    for (size_t j = 0; j < cols; j++) o[j] += q[j];
  }
}

/** x's rows [t0 * kTile, t1 * kTile) in tiles [t][K][kTile] (zeros past M) at ap + t * K * kTile. */
void pack_tiles(const Problem& p, size_t t0, size_t t1, float* ap);
/** pack_tiles with AVX2 transposes (a CPU with AVX2). */
void pack_tiles_avx2(const Problem& p, size_t t0, size_t t1, float* ap);
/** Rows [m0, m1) of a few-row problem (m1 - m0 <= kFewRows, kFewRowsAvx2 in the AVX2 build), panels [p0, p1). */
void few_avx512(const Problem& p, size_t m0, size_t m1, size_t p0, size_t p1);
void few_avx2(const Problem& p, size_t m0, size_t m1, size_t p0, size_t p1);
void few_generic(const Problem& p, size_t m0, size_t m1, size_t p0, size_t p1);
/** Tiles [t0, t1) (packed by pack_tiles at ap) times panels [p0, p1), the bias in the last block's store. */
void tiles_avx512(const Problem& p, const float* ap, size_t t0, size_t t1, size_t p0, size_t p1);
void tiles_avx2(const Problem& p, const float* ap, size_t t0, size_t t1, size_t p0, size_t p1);
void tiles_generic(const Problem& p, const float* ap, size_t t0, size_t t1, size_t p0, size_t p1);
}  // namespace dense

}  // namespace mlxc::cpu
