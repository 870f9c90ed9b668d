// Channels-last 1-D/2-D convolution as one product on the CPU (spec/kernels/conv.ts): MLX's CPU
// conv_general pads the input into a copy, materialises the whole im2col matrix with a generic
// strided copy on one thread, and hands OpenBLAS one sgemm (which packs the weight on every call).
// Here the weight is packed once (conv_pack_weight: panels of kPanel output channels, [P, ...k, C,
// kPanel], zero past O), and each task of the thread pool packs the im2col rows of a block of
// output positions straight from the unpadded input (zeros where the window leaves it), kDepthBlock
// columns at a time, multiplies them by the panels with a register-blocked kernel (AVX-512 where the
// CPU has it, else AVX2+FMA, else a portable loop) and applies bias, residual and clamp in the last pass's
// store. A 1x1 convolution with unit strides and no padding reads the input rows in place.
// Grouped: the packed weight's channel axis holds C / groups channels (groups = C over it), and
// each group has its own panels (ceil(O / groups / kPanel) of them, in group order, zeros past the
// group's channels); a task's rows are packed from its group's channels only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <vector>

#include "kernels/common/cpu.h"
#include "mlx/mlx.h"

namespace mlxc::cpu {

namespace mx = mlx::core;

/** Output channels per weight panel. */
constexpr int kPanel = 32;

/**
 * w [O, ...k, C] (MLX's layout) -> [ceil(O / kPanel), ...k, C, kPanel], zeros past O. In the AVX2
 * build (avx2_build(), cpu.h) each panel's data is its first 16 channels' [...k, C, 16] and then
 * the other 16's, under the same shape: its 6 x 16 kernel then streams a half panel's rows 64 bytes
 * apart, front to back, rather than every other line of 128-byte rows (half of L1's sets; 7-11%
 * slower on Zen 3). The layout is the kernels' own, made and read by this library only.
 */
mx::array conv_pack_weight(const mx::array& w, mx::Stream s);

/** clamp(conv(x, w) + bias + residual, lo, hi), channels-last: x [N, ...spatial, C], wp from
 * conv_pack_weight of a [O, ...k, C] weight (grouped, C / g channels: [g * ceil(O / g / kPanel),
 * ...k, C / g, kPanel], the groups' panels one after another, each group's padded apart), bias [O], residual the result's shape [N, ...out,
 * O]; strides, pads (begin and end) and dilations per spatial axis. 1 or 2 spatial axes, float32, on the CPU, natively; otherwise (and with
 * MLXC_CPU_KERNELS=off) MLX's conv_general on the unpacked weight, with the same result. */
mx::array conv_gemm(const mx::array& x, const mx::array& wp, int o, const std::optional<mx::array>& bias,
                    const std::optional<mx::array>& residual, const std::vector<int>& strides, const std::vector<int>& pads_begin,
                    const std::vector<int>& pads_end, const std::vector<int>& dilations, float lo, float hi, mx::Stream s);

namespace convgemm {
/** Output positions per task block and K columns per pass (the AVX-512 kernel's register tile is 12 rows). */
constexpr int kRowBlock = 96;
constexpr int kDepthBlock = 256;
/**
 * The AVX2 build's longest pass over K, split evenly (pass_depth, cpu.h): each 6 x 16 kernel call streams
 * its half panel and rows front to back, and every pass reloads the sums and restarts their
 * chains. On Zen 3 the 3x3 convolutions of ResNet-50's later stages (K 2304) ran at ~71 GFLOP/s a
 * core in passes of 256 and ~83 in passes of 1152 (its rows' block then lives in L2).
 */
constexpr int kDepthAvx2 = 1152;
/**
 * The AVX-512 build's longest pass over K, split evenly likewise: on Zen 4 (512-bit operations on
 * 256-bit units, 1 MiB of L2) ResNet-50's convolutions ran 4-14% faster a core in passes of 1152
 * than of 256 (the 3x3 512 -> 512 at 7x7: 88 -> 101 GFLOP/s).
 */
constexpr int kDepthAvx512 = 1152;
/** K per pass for a product of depth K in the build that runs (avx2_build, AVX-512, or the portable one). */
inline size_t build_pass(size_t depth) {
  return avx2_build() ? pass_depth(depth, kDepthAvx2) : has_avx512() ? pass_depth(depth, kDepthAvx512) : kDepthBlock;
}
/** Products of fewer multiply-adds (padded panels counted) run on the calling thread. */
constexpr size_t kSerialMacs = size_t{1} << 20;

/** One 2-D problem (1-D as height 1), channels-last. */
struct Shape {
  size_t n, ih, iw, c, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, o;
  /** Groups: c / g input channels and o / g output channels each. */
  size_t g = 1;
  /** Nonzero: x is not the input but its im2col rows, packed whole with this row stride (read in place). */
  size_t ld = 0;
  size_t rows() const { return n * oh * ow; }
  size_t cg() const { return c / g; }
  size_t og() const { return o / g; }
  size_t depth() const { return kh * kw * cg(); }
  /** Panels per group, and in all. */
  size_t group_panels() const { return (og() + kPanel - 1) / kPanel; }
  size_t panels() const { return g * group_panels(); }
  /** A 1x1 window over every position: the input rows are the im2col rows. */
  bool direct() const { return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && ih == oh && iw == ow; }
};

/** buf[r][0, kc) = im2col row m0 + r of group gi, columns [k0, k0 + kc) (column order: ky, kx, the
 * group's channels), r < mc. */
void pack_rows(const Shape& s, const float* x, size_t m0, size_t mc, size_t k0, size_t kc, float* buf, size_t gi = 0);
/** Panel p's group, its first output channel and its channel count. */
inline void panel_columns(const Shape& s, size_t p, size_t& gi, size_t& col, size_t& ncols) {
  const size_t gp = s.group_panels(), pj = p % gp;
  gi = p / gp;
  col = gi * s.og() + pj * kPanel;
  ncols = std::min<size_t>(kPanel, s.og() - pj * kPanel);
}
/**
 * The walk of one task that every build's run_* shares: the rows of block task / ntasks_n, the
 * panels of share task % ntasks_n group by group (each group's rows are its own channels), K in
 * passes of `depth` (build_pass). Rows are read in place only
 * within one pass of at most kDepthBlock: with more K, rows a multiple of 4 KiB apart (K 1024,
 * 2048) fall in the same L1 sets, so those are packed a pass wide
 * like im2col rows (into buf). For each panel of each pass:
 * panel(a, lda, m0, mc, kc, first, last, b, col, ncols): rows [m0, m0 + mc) at a (lda apart), the
 * panel's pass b ([kc][kPanel], or with `split` its first half's [kc][kPanel / 2], the second's
 * K * kPanel / 2 floats on), its first output channel and channel count.
 */
template <class Panel>
inline void walk_task(const Shape& s, const float* x, const float* wp, size_t task, size_t ntasks_n, float* buf, size_t depth, bool split,
                      Panel&& panel) {
  const size_t M = s.rows(), K = s.depth(), P = s.panels(), GP = s.group_panels();
  const size_t mb = task / ntasks_n, nb = task % ntasks_n;
  const size_t m0 = mb * kRowBlock, m1 = std::min<size_t>(M, m0 + kRowBlock), mc = m1 - m0;
  const size_t per = (P + ntasks_n - 1) / ntasks_n, p0 = nb * per, p1 = std::min(P, p0 + per);
  if (p0 >= p1) return;
  const bool direct = s.ld || (s.direct() && K <= static_cast<size_t>(kDepthBlock));
  const size_t ldx = s.ld ? s.ld : s.c;
  for (size_t q0 = p0; q0 < p1;) {
    const size_t gi = q0 / GP, q1 = std::min(p1, (gi + 1) * GP);
    for (size_t k0 = 0; k0 < K; k0 += depth) {
      const size_t kc = std::min<size_t>(depth, K - k0);
      const float* a = buf;
      size_t lda = kc;
      if (direct) {
        a = x + m0 * ldx + (s.ld ? 0 : gi * s.cg()) + k0;
        lda = ldx;
      } else {
        pack_rows(s, x, m0, mc, k0, kc, buf, gi);
      }
      const bool first = k0 == 0, last = k0 + kc >= K;
      for (size_t p = q0; p < q1; p++) {
        size_t pg, col, ncols;
        panel_columns(s, p, pg, col, ncols);
        panel(a, lda, m0, mc, kc, first, last, wp + p * K * kPanel + k0 * (split ? kPanel / 2 : kPanel), col, ncols);
      }
    }
    q0 = q1;
  }
}
/** Few output channels per group (at most kDirectChannels): the direct kernel (conv_direct_impl.h)
 * reads the input in place instead of packing im2col rows for a mostly empty panel. */
constexpr size_t kDirectChannels = 16;
inline bool direct_fits(const Shape& s) { return s.og() <= kDirectChannels && s.ld == 0; }
/** Output rows [r0, r1) of every group (row = image * oh + oy) by the direct kernel. */
void direct_avx2(const Shape& s, const float* x, const float* wp, const float* bias, const float* res, float* y, float lo, float hi,
                 size_t r0, size_t r1);
/** One task: the rows of block task / ntasks_n, the panels of share task % ntasks_n; buf holds kRowBlock x build_pass floats (null where
 * s.ld: rows read in place). */
void run_avx512(const Shape& s, const float* x, const float* wp, const float* bias, const float* res, float* y, float lo, float hi,
                size_t task, size_t ntasks_n, float* buf);
void run_avx2(const Shape& s, const float* x, const float* wp, const float* bias, const float* res, float* y, float lo, float hi,
              size_t task, size_t ntasks_n, float* buf);
void run_generic(const Shape& s, const float* x, const float* wp, const float* bias, const float* res, float* y, float lo, float hi,
                 size_t task, size_t ntasks_n, float* buf);
}  // namespace convgemm

/**
 * An ONNX convolution weight [o, c, ...kernel] (s kernel taps, `group` groups of o / group output
 * channels; c input channels per group) in host memory packed into the native convolution's panels,
 * [group * ceil(o / group / 32), ...kernel, c, 32], each group's panels in turn, on the kernel pool's
 * threads: src is little-endian float32 bytes at any alignment; dst is zero-filled by the caller
 * (zeros past each group's channels), its pages populated here. The panels' halves lie apart where
 * avx2_build() says so, as conv_pack_weight's.
 */
void conv_pack_host(float* dst, const void* src, size_t o, size_t c, size_t s, size_t group);

}  // namespace mlxc::cpu
