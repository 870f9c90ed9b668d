// The fused CPU kernels' arithmetic, written once over a vector type V and compiled twice: for
// plain floats (math_generic.cpp) and for AVX2+FMA (math_avx2.cpp, built with -mavx2 -mfma and only
// called after a runtime check). Each includer wraps this in its own namespace (MLXC_MATH_NS), and
// nothing here instantiates standard-library templates, so no AVX2 code can leak into shared
// inline symbols. The polynomials come from scripts/fit-cpu-math.mjs.
//
// Edge values: NaN propagates; exp(+inf) = inf, exp(-inf) = 0; the GELU and SiLU forms give their
// limits at -inf (0, where the textbook formulas give -inf * 0 = NaN); results below FLT_MIN are
// denormals, not flushed to zero.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace MLXC_MATH_NS {

/** One float: the portable path, and the tails of the vector loops. */
struct S {
  float v;
  using M = bool;
  static constexpr size_t W = 1;
  static S load(const float* p) { return {*p}; }
  static void store(float* p, S a) { *p = a.v; }
  static S splat(float f) { return {f}; }
  friend S operator+(S a, S b) { return {a.v + b.v}; }
  friend S operator-(S a, S b) { return {a.v - b.v}; }
  friend S operator*(S a, S b) { return {a.v * b.v}; }
  friend S operator/(S a, S b) { return {a.v / b.v}; }
#ifdef __FMA__
  static S fma(S a, S b, S c) { return {__builtin_fmaf(a.v, b.v, c.v)}; }
#else
  static S fma(S a, S b, S c) { return {a.v * b.v + c.v}; }
#endif
  static S min(S a, S b) { return {a.v < b.v ? a.v : b.v}; }
  static S max(S a, S b) { return {a.v > b.v ? a.v : b.v}; }
  static S abs(S a) { return {__builtin_fabsf(a.v)}; }
  static S copysign(S mag, S sign) { return {__builtin_copysignf(mag.v, sign.v)}; }
  static M lt(S a, S b) { return a.v < b.v; }
  static M gt(S a, S b) { return a.v > b.v; }
  static M isnan(S a) { return a.v != a.v; }
  static M isinf(S a) { return __builtin_fabsf(a.v) == __builtin_inff(); }
  static M mor(M a, M b) { return a || b; }
  static bool any(M m) { return m; }
  static S select(M m, S a, S b) { return m ? a : b; }
  // Nearest, ties to even, for |a| < 2^22 (all this code needs): no libm call without SSE4.1.
  static S round(S a) {
    const float big = 12582912.0f;  // 1.5 * 2^23 (IEEE arithmetic: not folded without -ffast-math)
    return {(a.v + big) - big};
  }
  static S pow2(S n) {
    uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n.v) + 127) << 23;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return {f};
  }
  static float hsum(S a) { return a.v; }
  static float hmax(S a) { return a.v; }
};

// Both V types provide: W (lanes), load/store, splat, + - * /, fma(a, b, c) = a*b + c, min, max,
// abs, copysign(mag, sign), lt/gt/isnan/isinf masks, select(mask, if_true, if_false), round
// (to nearest even), pow2(n) = 2^n for integer-valued n in [-126, 127], hsum, hmax.

constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kExpHi = 88.72283935546875f;  // above: +inf
constexpr float kExpLo = -103.972084f;        // below: 0 (under half the smallest denormal)

template <class V>
inline V vexp(V x) {
  V xc = V::min(V::max(x, V::splat(kExpLo)), V::splat(kExpHi));
  V n = V::round(xc * V::splat(kLog2e));
  V r = V::fma(n, V::splat(-kLn2Hi), xc);
  r = V::fma(n, V::splat(-kLn2Lo), r);
  // e^r on |r| <= ln2/2: Taylor to degree 7 (truncation 5e-9 relative).
  V p = V::splat(1.0f / 5040);
  p = V::fma(p, r, V::splat(1.0f / 720));
  p = V::fma(p, r, V::splat(1.0f / 120));
  p = V::fma(p, r, V::splat(1.0f / 24));
  p = V::fma(p, r, V::splat(1.0f / 6));
  p = V::fma(p, r, V::splat(0.5f));
  p = V::fma(p, r, V::splat(1.0f));
  p = V::fma(p, r, V::splat(1.0f));
  // 2^n in two factors, so that n down to -150 (denormal results) and up to 128 stay exact.
  V n1 = V::round(n * V::splat(0.5f) - V::splat(0.25f));  // floor(n / 2) for integer n
  V y = p * V::pow2(n1) * V::pow2(n - n1);
  y = V::select(V::gt(x, V::splat(kExpHi)), V::splat(__builtin_inff()), y);
  y = V::select(V::lt(x, V::splat(kExpLo)), V::splat(0.0f), y);
  return V::select(V::isnan(x), x, y);
}

/** erf(x) for |x| < 1 (x * P(x^2)). */
template <class V>
inline V erf_small(V x) {
  V z = x * x;
  V p = V::splat(-0.0005632122047245502f);
  p = V::fma(p, z, V::splat(0.004917746409773827f));
  p = V::fma(p, z, V::splat(-0.026711508631706238f));
  p = V::fma(p, z, V::splat(0.11280188709497452f));
  p = V::fma(p, z, V::splat(-0.3761232793331146f));
  p = V::fma(p, z, V::splat(1.1283791065216064f));
  return x * p;
}

/** erfc(a) for 1 <= a < 4 as exp(Q(u)), Q ~ log(erfc), u = (a - 2.5) / 1.5; 0 from a = 4 on (below float32's resolution of 1 - erf). */
template <class V>
inline V erfc_large(V a) {
  V u = (V::min(a, V::splat(4.0f)) - V::splat(2.5f)) * V::splat(1.0f / 1.5f);
  V q = V::splat(0.00004100185105926357f);
  q = V::fma(q, u, V::splat(-0.00022727296163793653f));
  q = V::fma(q, u, V::splat(0.0008822596282698214f));
  q = V::fma(q, u, V::splat(-0.0031906883232295513f));
  q = V::fma(q, u, V::splat(0.010960725136101246f));
  q = V::fma(q, u, V::splat(-0.03664739429950714f));
  q = V::fma(q, u, V::splat(-2.12376070022583f));
  q = V::fma(q, u, V::splat(-8.029021263122559f));
  q = V::fma(q, u, V::splat(-7.806815147399902f));
  return V::select(V::lt(a, V::splat(4.0f)), vexp(q), V::splat(0.0f));
}

/** erfc(a) for a >= 4: exp(-a^2) S(1/a^2) / a, a^2 split in two floats so that exp(-a^2) keeps its
 * precision; 0 from a = 10.5 on (below the smallest denormal). */
template <class V>
inline V erfc_tail(V a) {
  V ac = V::min(a, V::splat(10.5f));
  V w = V::splat(1.0f) / (ac * ac);
  V p = V::splat(1.8889617919921875f);
  p = V::fma(p, w, V::splat(-0.9573041796684265f));
  p = V::fma(p, w, V::splat(0.4203470051288605f));
  p = V::fma(p, w, V::splat(-0.2820586860179901f));
  p = V::fma(p, w, V::splat(0.5641894340515137f));
  V hi = ac * ac;
  V lo = V::fma(ac, ac, V::splat(0.0f) - hi);  // a^2 - hi, exactly
  V e = vexp(V::splat(0.0f) - hi) * (V::splat(1.0f) - lo);
  return V::select(V::lt(a, V::splat(10.5f)), e * p / ac, V::splat(0.0f));
}

template <class V>
inline V verf(V x) {
  V a = V::abs(x);
  V large = V::copysign(V::splat(1.0f) - erfc_large(a), x);
  V y = V::select(V::lt(a, V::splat(1.0f)), erf_small(x), large);
  return V::select(V::isnan(x), x, y);
}

/** 0.5 x (1 + erf(x / sqrt 2)); where x / sqrt 2 <= -1, 1 + erf is erfc(|.|), computed without the cancellation. */
template <class V>
inline V vgelu(V x) {
  V z = x * V::splat(0.70710678118654752f);
  V a = V::abs(z);
  // Each branch only where some lane needs it: most activations have |x / sqrt 2| < 1.
  V one_plus = V::splat(1.0f) + erf_small(z);
  if (V::any(V::mor(V::gt(a, V::splat(1.0f)), V::isnan(a)))) {
    V e = erfc_large(a);
    if (V::any(V::gt(a, V::splat(4.0f)))) e = V::select(V::lt(a, V::splat(4.0f)), e, erfc_tail(a));
    V big = V::select(V::lt(z, V::splat(0.0f)), e, V::splat(2.0f) - e);
    one_plus = V::select(V::lt(a, V::splat(1.0f)), one_plus, big);
  }
  V y = V::splat(0.5f) * x * one_plus;
  // The limits at ±inf (the product is -inf * 0 at -inf); NaN propagates through the product.
  return V::select(V::isinf(x), V::max(x, V::splat(0.0f)), y);
}

template <class V>
inline V vtanh(V x) {
  V a = V::abs(x);
  V z = x * x;
  V p = V::splat(-0.005660877097398043f);
  p = V::fma(p, z, V::splat(0.02059193328022957f));
  p = V::fma(p, z, V::splat(-0.05372143164277077f));
  p = V::fma(p, z, V::splat(0.13331133127212524f));
  p = V::fma(p, z, V::splat(-0.3333325982093811f));
  V small = V::fma(x * z, p, x);
  // |x| >= 0.625: 1 - 2 / (e^{2|x|} + 1) (exp saturates to inf, giving 1).
  V e = vexp(a + a);
  V large = V::copysign(V::splat(1.0f) - V::splat(2.0f) / (e + V::splat(1.0f)), x);
  V y = V::select(V::lt(a, V::splat(0.625f)), small, large);
  return V::select(V::isnan(x), x, y);
}

/** x / (1 + e), with the limit 0 where e overflowed (x at -inf, where the quotient is -inf / inf). */
template <class V>
inline V div_one_plus(V x, V e) {
  V y = x / (e + V::splat(1.0f));
  return V::select(V::isinf(e), V::splat(0.0f), y);
}

template <class V>
inline V vsigmoid(V x) {
  return V::splat(1.0f) / (vexp(V::splat(0.0f) - x) + V::splat(1.0f));
}

template <class V>
inline V vact(V x, int act) {
  switch (act) {
    case 0: return vexp(x);
    case 1: return verf(x);
    case 2: return vtanh(x);
    case 3: return vsigmoid(x);
    case 4: return V::select(V::isnan(x), x, V::max(x, V::splat(0.0f)));
    case 5: return V::select(V::isnan(x), x, div_one_plus(x, vexp(V::splat(0.0f) - x)));
    case 6: return vgelu(x);
    case 7: {  // 0.5 x (1 + tanh(u)) = x / (1 + e^{-2u}), u = sqrt(2/pi) (x + 0.044715 x^3)
      V u = V::splat(0.7978845608028654f) * V::fma(V::splat(0.044715f) * x, x * x, x);
      V y = div_one_plus(x, vexp(V::splat(-2.0f) * u));
      return V::select(V::isnan(x), x, y);
    }
    default: return x;
  }
}

template <class V>
void act_span(const float* in, const float* bias, float* out, size_t n, int act) {
  size_t i = 0;
  if (bias) {
    for (; i + V::W <= n; i += V::W) V::store(out + i, vact(V::load(in + i) + V::load(bias + i), act));
  } else {
    for (; i + V::W <= n; i += V::W) V::store(out + i, vact(V::load(in + i), act));
  }
  for (; i < n; i++) {
    float v = in[i] + (bias ? bias[i] : 0.0f);
    out[i] = vact(S::splat(v), act).v;
  }
}

/** act in place over `rows` rows of `cols` floats, `ld` apart (a block of a matrix: a product's epilogue). */
template <class V>
void act_block(float* c, size_t ld, size_t rows, size_t cols, int act) {
  for (size_t r = 0; r < rows; r++) act_span<V>(c + r * ld, nullptr, c + r * ld, cols, act);
}

template <class V>
void act_rows(const float* in, const float* bias, float* out, size_t n, size_t c, int act) {
  if (!bias) return act_span<V>(in, nullptr, out, n, act);
  for (size_t r = 0; r + c <= n; r += c) act_span<V>(in + r, bias, out + r, c, act);
}

/** out[i] = clamp(x[i] * a + b, 0, 1), times x[i] when swish (out may be x). The selects keep a NaN as
 * it is (h < 0 ? 0 : h, then h > 1 ? 1 : h: comparisons with NaN are false). */
template <class V>
void hard_sigmoid_span(const float* x, float* out, size_t n, float a, float b, bool swish) {
  size_t i = 0;
  if constexpr (V::W > 1) {
    const V va = V::splat(a), vb = V::splat(b), zero = V::splat(0.0f), one = V::splat(1.0f);
    for (; i + V::W <= n; i += V::W) {
      const V v = V::load(x + i);
      V h = V::fma(v, va, vb);
      h = V::select(V::lt(h, zero), zero, h);
      h = V::select(V::gt(h, one), one, h);
      V::store(out + i, swish ? v * h : h);
    }
  }
  for (; i < n; i++) {
    const float v = x[i];
    float h = v * a + b;
    h = h < 0.0f ? 0.0f : h;
    h = h > 1.0f ? 1.0f : h;
    out[i] = swish ? v * h : h;
  }
}

template <class V>
float row_max(const float* x, size_t n) {
  size_t i = 0;
  float m = -__builtin_inff();
  bool nan = false;
  if (n >= V::W) {
    V vm = V::load(x);
    typename V::M vnan = V::isnan(vm);
    for (i = V::W; i + V::W <= n; i += V::W) {
      V v = V::load(x + i);
      vnan = V::mor(vnan, V::isnan(v));
      vm = V::max(vm, v);
    }
    m = V::hmax(vm);
    nan = V::any(vnan);
  }
  for (; i < n; i++) {
    nan = nan || x[i] != x[i];
    m = x[i] > m ? x[i] : m;
  }
  return nan ? __builtin_nanf("") : m;
}

template <class V>
void softmax_row(const float* x, float* out, size_t n, bool log) {
  if (n == 0) return;
  float m = row_max<V>(x, n);
  V vm = V::splat(m);
  V acc = V::splat(0.0f);
  float tail = 0;
  size_t i = 0;
  for (; i + V::W <= n; i += V::W) {
    V e = vexp(V::load(x + i) - vm);
    if (!log) V::store(out + i, e);
    acc = acc + e;
  }
  for (; i < n; i++) {
    float e = vexp(S::splat(x[i] - m)).v;
    if (!log) out[i] = e;
    tail += e;
  }
  float sum = V::hsum(acc) + tail;
  if (log) {
    // (x - max) - log(sum): x - max is exact near the max, where the result is small.
    float ls = __builtin_logf(sum);
    V vls = V::splat(ls);
    for (i = 0; i + V::W <= n; i += V::W) V::store(out + i, (V::load(x + i) - vm) - vls);
    for (; i < n; i++) out[i] = (x[i] - m) - ls;
  } else {
    V inv = V::splat(1.0f / sum);
    for (i = 0; i + V::W <= n; i += V::W) V::store(out + i, V::load(out + i) * inv);
    for (; i < n; i++) out[i] *= 1.0f / sum;
  }
}

template <class V>
float row_sum(const float* x, size_t n, float shift, bool square) {
  V acc = V::splat(0.0f);
  V vs = V::splat(shift);
  size_t i = 0;
  for (; i + V::W <= n; i += V::W) {
    V d = V::load(x + i) - vs;
    acc = square ? V::fma(d, d, acc) : acc + d;
  }
  float t = V::hsum(acc);
  for (; i < n; i++) {
    float d = x[i] - shift;
    t += square ? d * d : d;
  }
  return t;
}

/** out = (x - shift) * scale * w + b, w and b optional. */
template <class V>
void row_affine(const float* x, const float* w, const float* b, float* out, size_t n, float shift, float scale) {
  V vs = V::splat(shift), vk = V::splat(scale);
  size_t i = 0;
  for (; i + V::W <= n; i += V::W) {
    V y = (V::load(x + i) - vs) * vk;
    if (w) y = y * V::load(w + i);
    if (b) y = y + V::load(b + i);
    V::store(out + i, y);
  }
  for (; i < n; i++) {
    float y = (x[i] - shift) * scale;
    if (w) y *= w[i];
    if (b) y += b[i];
    out[i] = y;
  }
}

template <class V>
void layer_norm_row(const float* x, const float* w, const float* b, float* out, size_t n, float eps) {
  if (n == 0) return;
  float mean = row_sum<V>(x, n, 0.0f, false) / static_cast<float>(n);
  float var = row_sum<V>(x, n, mean, true) / static_cast<float>(n);
  row_affine<V>(x, w, b, out, n, mean, 1.0f / __builtin_sqrtf(var + eps));
}

template <class V>
void rms_norm_row(const float* x, const float* w, float* out, size_t n, float eps) {
  if (n == 0) return;
  float ms = row_sum<V>(x, n, 0.0f, true) / static_cast<float>(n);
  row_affine<V>(x, w, nullptr, out, n, 0.0f, 1.0f / __builtin_sqrtf(ms + eps));
}

}  // namespace MLXC_MATH_NS
