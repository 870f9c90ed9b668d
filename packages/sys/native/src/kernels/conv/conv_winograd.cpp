// Winograd's F(2x2, 3x3) (conv_winograd.h): the input's 4x4 patches and the weight transformed,
// 16 products of [tiles, C] x [C, O] by the channels-last convolution's own kernels (as 1x1
// windows over rows read in place), and the 2x2 outputs transformed back with the epilogue. Tiles
// go in chunks whose transformed data stays within a few MiB.
#include "kernels/conv/conv_winograd.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "env.h"
#include "kernels/common/cpu.h"

namespace mlxc::cpu::winograd {
namespace {

/** Bytes of the transformed input and products per chunk of tiles, at least and at most. */
constexpr size_t kChunkBytes = size_t{1} << 20;
constexpr size_t kMaxChunkBytes = size_t{8} << 20;
/** Tiles per chunk at least (two register tiles of rows), whatever the channels. */
constexpr size_t kMinChunk = 24;

bool enabled() {
  static const bool on = !env_off("MLXC_WINOGRAD");
  return on;
}

/** The tile's image, and its first input row and column (the patch's top left, padding counted). */
struct TileAt {
  size_t img, ty, tx;
  long iy0, ix0;
};
inline TileAt tile_at(const convgemm::Shape& s, size_t tile) {
  const size_t tw = tiles_of(s.ow), per = tiles_of(s.oh) * tw;
  const size_t img = tile / per, r = tile % per, ty = r / tw, tx = r % tw;
  return {img, ty, tx, static_cast<long>(2 * ty) - static_cast<long>(s.ph), static_cast<long>(2 * tx) - static_cast<long>(s.pw)};
}

/** One tile's input patch transformed, Bᵀ d B: the tile's row of each of the 16 matrices, at v, `plane` floats apart. */
void input_tile(const convgemm::Shape& s, const float* x, const float* zeros, size_t tile, float* v, size_t plane) {
  const TileAt t = tile_at(s, tile);
  const float* d[16];
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 4; b++) {
      const long iy = t.iy0 + a, ix = t.ix0 + b;
      const bool in = iy >= 0 && iy < static_cast<long>(s.ih) && ix >= 0 && ix < static_cast<long>(s.iw);
      d[a * 4 + b] = in ? x + ((t.img * s.ih + static_cast<size_t>(iy)) * s.iw + static_cast<size_t>(ix)) * s.c : zeros;
    }
  // Channel by channel, Bᵀ d B in registers: rows (a) of each column (b), then columns of each row.
  // (ivdep: the input and the transformed rows never overlap.)
#pragma GCC ivdep
  for (size_t c = 0; c < s.c; c++) {
    float e[16];
    for (int b = 0; b < 4; b++) {
      const float d0 = d[b][c], d1 = d[4 + b][c], d2 = d[8 + b][c], d3 = d[12 + b][c];
      e[b] = d0 - d2;
      e[4 + b] = d1 + d2;
      e[8 + b] = d2 - d1;
      e[12 + b] = d1 - d3;
    }
    for (int a = 0; a < 4; a++) {
      const float q0 = e[a * 4], q1 = e[a * 4 + 1], q2 = e[a * 4 + 2], q3 = e[a * 4 + 3];
      v[(a * 4) * plane + c] = q0 - q2;
      v[(a * 4 + 1) * plane + c] = q1 + q2;
      v[(a * 4 + 2) * plane + c] = q2 - q1;
      v[(a * 4 + 3) * plane + c] = q1 - q3;
    }
  }
}

/** One tile's outputs: Aᵀ m A from the tile's row of the 16 products (at m, `plane` floats apart), plus bias and residual, clamped,
 * stored where inside the output. */
void output_tile(const convgemm::Shape& s, const float* m, size_t plane, size_t tile, const float* bias, const float* zeros,
                 const float* res, float* y, float lo, float hi, float* sink) {
  const TileAt t = tile_at(s, tile);
  const size_t O = s.o;
  size_t at[4];
  bool inside[4];
  for (size_t i = 0; i < 2; i++)
    for (size_t k = 0; k < 2; k++) {
      const size_t oy = 2 * t.ty + i, ox = 2 * t.tx + k;
      inside[i * 2 + k] = oy < s.oh && ox < s.ow;
      at[i * 2 + k] = ((t.img * s.oh + oy) * s.ow + ox) * O;
    }
  const float* bo = bias ? bias : zeros;
  // Positions past the output are written to `sink` (discarded), with no residual.
  float* ys[4];
  const float* rs[4];
  for (int q = 0; q < 4; q++) {
    ys[q] = inside[q] ? y + at[q] : sink;
    rs[q] = res && inside[q] ? res + at[q] : zeros;
  }
  // Output channel by channel, Aᵀ m A in registers, then bias, residual and the clamp (the bound
  // first: a NaN fails both comparisons and stays). (ivdep: the products never overlap the
  // output; the residual is read where it is written.)
#pragma GCC ivdep
  for (size_t o = 0; o < O; o++) {
    float r[8];
    for (int b = 0; b < 4; b++) {
      const float m0 = m[b * plane + o], m1 = m[(4 + b) * plane + o], m2 = m[(8 + b) * plane + o], m3 = m[(12 + b) * plane + o];
      r[b] = m0 + m1 + m2;
      r[4 + b] = m1 - m2 - m3;
    }
    const float out[4] = {r[0] + r[1] + r[2], r[1] - r[2] - r[3], r[4] + r[5] + r[6], r[5] - r[6] - r[7]};
    for (int q = 0; q < 4; q++) {
      float v = out[q] + bo[o] + rs[q][o];
      v = v < lo ? lo : v;
      ys[q][o] = v > hi ? hi : v;
    }
  }
}

}  // namespace

bool all_finite(const float* x, size_t n) {
  std::atomic<bool> bad{false};
  const auto scan = [&](size_t i0, size_t i1) {
    uint32_t any = 0;
    for (size_t i = i0; i < i1; i++) {
      uint32_t b;
      std::memcpy(&b, x + i, sizeof b);
      any |= (b & 0x7f800000u) == 0x7f800000u;
    }
    if (any) bad.store(true, std::memory_order_relaxed);
  };
  if (n < (size_t{1} << 16) || num_threads() <= 1)
    scan(0, n);
  else
    parallel_for(n, size_t{1} << 14, scan);
  return !bad.load();
}

bool fits(const convgemm::Shape& s, bool kept) {
  if (s.kh != 3 || s.kw != 3 || s.sh != 1 || s.sw != 1 || s.dh != 1 || s.dw != 1 || s.g != 1 || s.ld != 0) return false;
  if (s.c < kMinChannels || s.o < kMinChannels || s.oh == 0 || s.ow == 0) return false;
  const size_t tiles = s.n * tiles_of(s.oh) * tiles_of(s.ow);
  return tiles >= (kept ? kMinTiles : kFirstTiles) && enabled();
}

void transform_weight(const convgemm::Shape& s, const float* wp, bool split, float* u) {
  const size_t C = s.c, P = s.panels(), depth = 9 * C, plane = P * C * kPanel;
  constexpr size_t J = kPanel, H = kPanel / 2;
  // A panel's 32 channels (each half of 16 a run of its own where split) at depth d, in or out.
  const auto read = [&](size_t p, size_t d, float* dst) {
    if (!split) return std::memcpy(dst, wp + (p * depth + d) * J, J * sizeof(float)), void();
    std::memcpy(dst, wp + (p * 2 * depth + d) * H, H * sizeof(float));
    std::memcpy(dst + H, wp + ((p * 2 + 1) * depth + d) * H, H * sizeof(float));
  };
  const auto write = [&](size_t k, size_t p, size_t c, const float* src) {
    float* at = u + k * plane;
    if (!split) return std::memcpy(at + (p * C + c) * J, src, J * sizeof(float)), void();
    std::memcpy(at + (p * 2 * C + c) * H, src, H * sizeof(float));
    std::memcpy(at + ((p * 2 + 1) * C + c) * H, src + H, H * sizeof(float));
  };
  parallel_for(P, 1, [&](size_t p0, size_t p1) {
    for (size_t p = p0; p < p1; p++)
      for (size_t c = 0; c < C; c++) {
        // The window's 9 taps of this input channel, for the panel's 32 output channels.
        float g[9][J], q[12][J], out[16][J];
        for (size_t tap = 0; tap < 9; tap++) read(p, tap * C + c, g[tap]);
        // G g (rows), then (G g) Gᵀ (columns); G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1].
        for (size_t kx = 0; kx < 3; kx++)
          for (size_t j = 0; j < J; j++) {
            const float g0 = g[kx][j], g1 = g[3 + kx][j], g2 = g[6 + kx][j];
            q[kx][j] = g0;
            q[3 + kx][j] = 0.5f * (g0 + g1 + g2);
            q[6 + kx][j] = 0.5f * (g0 - g1 + g2);
            q[9 + kx][j] = g2;
          }
        for (size_t a = 0; a < 4; a++)
          for (size_t j = 0; j < J; j++) {
            const float q0 = q[a * 3][j], q1 = q[a * 3 + 1][j], q2 = q[a * 3 + 2][j];
            out[a * 4][j] = q0;
            out[a * 4 + 1][j] = 0.5f * (q0 + q1 + q2);
            out[a * 4 + 2][j] = 0.5f * (q0 - q1 + q2);
            out[a * 4 + 3][j] = q2;
          }
        for (size_t k = 0; k < 16; k++) write(k, p, c, out[k]);
      }
  });
}

void run(const convgemm::Shape& s, const float* x, const float* u, const float* bias, const float* res, float* y, float lo, float hi) {
  const size_t C = s.c, O = s.o, P = s.panels(), plane = P * C * kPanel;
  const size_t tiles = s.n * tiles_of(s.oh) * tiles_of(s.ow);
  // The transformed rows' stride: off multiples of 4 KiB, whose rows would share L1's sets.
  const size_t ld = C % 1024 == 0 ? C + 16 : C;
  // Tiles per chunk: every chunk reads all of the transformed weight, so a large one takes larger
  // chunks (fewer passes over it), up to kMaxChunkBytes (the buffers stay with the thread).
  const size_t bytes = std::clamp(2 * 16 * C * P * kPanel * sizeof(float), kChunkBytes, kMaxChunkBytes);
  const size_t chunk = std::min(tiles, std::max<size_t>(kMinChunk, bytes / (16 * sizeof(float) * (ld + O))));
  // The 16 matrices of each lie a line past whole multiples of the chunk's rows: a tile's 16 rows
  // (written, then read, together) would otherwise fall in few L1 sets where those are 4 KiB multiples.
  const size_t vplane = chunk * ld + 16, mplane = chunk * O + 16;
  thread_local std::vector<float> vbuf, mbuf, zbuf;
  vbuf.resize(16 * vplane);
  mbuf.resize(16 * mplane);
  zbuf.assign(std::max(C, O), 0.0f);
  float* V = vbuf.data();
  float* M = mbuf.data();
  const float* zeros = zbuf.data();
  const int isa = has_avx512() ? 2 : has_avx2() ? 1 : 0;
  const size_t threads = static_cast<size_t>(std::max(1, num_threads()));
  constexpr float inf = std::numeric_limits<float>::infinity();
  for (size_t t0 = 0; t0 < tiles; t0 += chunk) {
    const size_t nt = std::min(chunk, tiles - t0);
    const bool serial = threads == 1 || 16 * nt * C * P * kPanel < convgemm::kSerialMacs;
    parallel_for_unless(serial, nt, 8, [&](size_t i0, size_t i1) {
      for (size_t i = i0; i < i1; i++) input_tile(s, x, zeros, t0 + i, V + i * ld, vplane);
    });
    // Each product as a 1x1 window over its rows, read in place (ld): row blocks split over panel
    // shares until there are 4 tasks a thread.
    convgemm::Shape g{};
    g.n = 1;
    g.ih = g.oh = 1;
    g.iw = g.ow = nt;
    g.c = C;
    g.kh = g.kw = g.sh = g.sw = g.dh = g.dw = 1;
    g.o = O;
    g.ld = ld;
    const size_t blocks = (nt + convgemm::kRowBlock - 1) / convgemm::kRowBlock;
    const size_t want = 4 * (serial ? 1 : threads), all = 16 * blocks;
    const size_t shares = all >= want ? 1 : std::min(P, (want + all - 1) / all);
    const size_t ntasks = all * shares;
    std::atomic<size_t> next{0};
    // No buffer: rows read in place are never packed (walk_task).
    parallel_for_unless(serial, serial ? 1 : std::min(threads, ntasks), 1, [&](size_t, size_t) {
      for (size_t i = next.fetch_add(1); i < ntasks; i = next.fetch_add(1)) {
        const size_t k = i / (blocks * shares), task = i % (blocks * shares);
        const float* xk = V + k * vplane;
        const float* uk = u + k * plane;
        float* mk = M + k * mplane;
        if (isa == 2)
          convgemm::run_avx512(g, xk, uk, nullptr, nullptr, mk, -inf, inf, task, shares, nullptr);
        else if (isa == 1)
          convgemm::run_avx2(g, xk, uk, nullptr, nullptr, mk, -inf, inf, task, shares, nullptr);
        else
          convgemm::run_generic(g, xk, uk, nullptr, nullptr, mk, -inf, inf, task, shares, nullptr);
      }
    });
    parallel_for_unless(serial, nt, 8, [&](size_t i0, size_t i1) {
      thread_local std::vector<float> sink;
      if (sink.size() < O) sink.resize(O);
      for (size_t i = i0; i < i1; i++) output_tile(s, M + i * O, mplane, t0 + i, bias, zeros, res, y, lo, hi, sink.data());
    });
  }
}

}  // namespace mlxc::cpu::winograd
