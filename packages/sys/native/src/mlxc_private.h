// Helpers shared by the hand-written and the generated C++: handle <-> C++ object conversion,
// parameter adapters and error reporting. Handles own heap-allocated C++ objects through ctx.
#pragma once

#include <complex>
#include <cstdint>
#include <cstring>
#include <functional>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "mlx/mlx.h"
#include "mlxc/functions.h"
// The front ends of the library's own CPU kernels (kernels/, spec/kernels/), which the generated
// glue calls.
#include "kernels/activation/activation.h"
#include "kernels/attention/fused_attention.h"
#include "kernels/attention/gqa_step.h"
#include "kernels/conv/conv_gemm.h"
#include "kernels/conv/depthwise.h"
#include "kernels/conv/epilogue.h"
#include "kernels/conv/pointwise.h"
#include "kernels/conv/small_conv.h"
#include "kernels/gemm/dense_gemm.h"
#include "kernels/gemm/small_gemm.h"
#include "kernels/index/take_rows.h"
#include "kernels/norm/norm.h"
#include "kernels/optim/optim.h"
#include "kernels/pool/mean.h"
#include "kernels/pool/pool.h"
#include "kernels/rnn/lstm.h"

namespace mlxc {

using mlx::core::array;
namespace mx = mlx::core;

/** Reports an error through the installed handler (mlx_set_error_handler). */
void raise(const char* msg);

using ClosureFn = std::function<std::vector<array>(const std::vector<array>&)>;
using ValueAndGradFn = std::function<std::pair<std::vector<array>, std::vector<array>>(const std::vector<array>&)>;
using CustomFn = std::function<std::vector<array>(const std::vector<array>&, const std::vector<array>&, const std::vector<array>&)>;
using CustomJvpFn = std::function<std::vector<array>(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&)>;

template <typename T, typename H>
T& get(H h, const char* what) {
  if (!h.ctx) throw std::invalid_argument(std::string("expected a non-empty ") + what + " handle");
  return *static_cast<T*>(h.ctx);
}

inline const array& arr(mlx_array a) { return get<array>(a, "mlx_array"); }
inline std::optional<array> opt_array(mlx_array a) { return a.ctx ? std::optional<array>(*static_cast<array*>(a.ctx)) : std::nullopt; }
inline mx::Stream stream(mlx_stream s) { return get<mx::Stream>(s, "mlx_stream"); }
inline mx::Device device(mlx_device d) { return get<mx::Device>(d, "mlx_device"); }
inline const std::vector<array>& vec(mlx_vector_array v) { return get<std::vector<array>>(v, "mlx_vector_array"); }
inline const ClosureFn& closure(mlx_closure c) { return get<ClosureFn>(c, "mlx_closure"); }

mx::Dtype dtype(mlx_dtype t);
/** On MLX's CUDA build, the device index of an array's buffer; -1 for unified or host memory (transfer.cpp). */
int buffer_device(const array& a);
/** The bytes of host data of shape `sh` and type `dt`; throws for a negative dimension, or null data for a non-empty array. */
size_t data_bytes(const void* data, const mx::Shape& sh, mx::Dtype dt);
/** Host data copied into a new array for the device that evaluates on `s` (mlxc_array_new_data_on). */
array new_data_on(const void* data, mx::Shape shape, mx::Dtype dtype, mx::Stream s);
/**
 * Populates the whole pages of a fresh host range [p, p + n) in one call per thread (ranges under
 * 1 MiB are left alone): on a virtual machine a page faulted in by the first write costs several
 * microseconds. The contents are not changed; a no-op where the kernel lacks MADV_POPULATE_WRITE.
 */
void populate_host(void* p, size_t n);
/** memcpy over up to four threads for ranges of several MiB (one core copies below the bus's rate). */
void copy_host(void* dst, const void* src, size_t n);
/**
 * A fresh private mapping of `head` + `size` bytes whose byte `head` lies on a 2 MiB boundary (the
 * resident arena's and the heap's chunks; resident.cpp); null where mmap fails.
 */
char* map_huge_aligned(size_t head, size_t size);
/**
 * Advises [p, p + size) MADV_HUGEPAGE, before any of its pages exists, where the budget allows
 * (`advised`, the bytes advised so far, plus `size` at most `budget`): whether it was advised.
 */
bool advise_huge(void* p, size_t size, size_t advised, size_t budget);
/**
 * Whether MLX's own allocator makes buffers in its CPU build's layout: the size in a word, the data
 * right after it (alloc_guard.cpp, probed once). The arena's and the heap's buffers copy it.
 */
bool common_layout();
/** Bytes held by live arrays of mlxc_array_new_resident's arena (resident.cpp): counted as active memory. */
size_t resident_live_bytes();
/** The most memory MLX's arrays and the arena's held together since the last reset_peak_memory (resident.cpp). */
size_t peak_memory();
/** Restarts peak_memory (and MLX's own peak) from what is held now. */
void reset_peak_memory();
/** What MLX's arrays hold: MLX's allocator's, the arena's and the heap's (heap.cpp) live bytes. */
size_t active_memory();
/** Memory held for reuse: MLX's cache and the heap's free bytes. */
size_t cache_memory();
/** Frees MLX's cache and the heap's idle chunks. */
void clear_cache();
/** Sets MLX's cache limit and the heap's; MLX's old one. */
size_t set_cache_limit(size_t limit);
/** Copies an evaluated, row-contiguous array's nbytes bytes into dst (mlxc_array_read). */
void read_into(void* dst, size_t nbytes, const array& a);
/**
 * The stream on which to make `a` contiguous before it is read: `s`, or the CPU's default stream
 * where `a` is float64 and `s` a GPU stream (MLX's GPU backends have no float64: a float64 result
 * computed on the CPU, as a GPU session computes float64 nodes, would fail its copy there).
 */
mx::Stream read_stream(const array& a, const mx::Stream& s);
/** On MLX's CUDA build, moves an evaluated array's unified memory in one transfer (mlxc_array_prefetch). */
bool prefetch(const array& a, bool to_host);
mlx_dtype to_c(mx::Dtype t);

inline std::optional<int> opt(mlx_optional_int o) { return o.has_value ? std::optional<int>(o.value) : std::nullopt; }
inline std::optional<float> opt(mlx_optional_float o) { return o.has_value ? std::optional<float>(o.value) : std::nullopt; }
inline std::optional<mx::Dtype> opt_dtype(mlx_optional_dtype o) {
  return o.has_value ? std::optional<mx::Dtype>(dtype(o.value)) : std::nullopt;
}
inline std::optional<std::string> opt_str(const char* s) { return s ? std::optional<std::string>(s) : std::nullopt; }

/** A (pointer, count) pair from the C side that converts to whichever container MLX asks for. */
template <typename T>
struct span {
  const T* p;
  size_t n;
  template <typename U>
  operator std::vector<U>() const {
    return std::vector<U>(p, p + n);
  }
  template <typename U>
  operator mx::SmallVector<U>() const {
    return mx::SmallVector<U>(p, p + n);
  }
};
template <typename T>
std::optional<std::vector<T>> opt_span(const T* p, size_t n) {
  return p ? std::optional<std::vector<T>>(std::vector<T>(p, p + n)) : std::nullopt;
}

// Assigning results: an out-handle that already owns an object is assigned into (mlx-c semantics),
// an empty one gets a new object.
template <typename T, typename H, typename V>
void assign(H& h, V&& v) {
  if (h.ctx)
    *static_cast<T*>(h.ctx) = std::forward<V>(v);
  else
    h.ctx = new T(std::forward<V>(v));
}
/**
 * Refuses a result whose shape holds more bytes than any memory (2^62): MLX computes sizes as a
 * wrapping size_t product, so such a shape (zeros of [65536, 65536, 65536, 65536]) reads as a
 * small or empty array to some kernels and as an enormous one to others.
 */
void check_result_size(const array& v);
inline void set(mlx_array& h, const array& v) {
  check_result_size(v);
  assign<array>(h, v);
}
inline void set(mlx_vector_array& h, std::vector<array> v) { assign<std::vector<array>>(h, std::move(v)); }
inline void set(mlx_closure& h, ClosureFn f) { assign<ClosureFn>(h, std::move(f)); }
template <typename T>
void set(bool& h, T v) {
  h = static_cast<bool>(v);
}
inline void set(size_t& h, size_t v) { h = v; }
inline void set(int& h, int v) { h = v; }

/** Streams made by mlxc_stream_new_any_thread, which any thread may evaluate (handles.cpp). */
void mark_any_thread(const mx::Stream& s);
bool is_any_thread(const mx::Stream& s);

/**
 * libmlx's own definition of `mangled` (dlsym in the object that holds mx::eval), or null: a symbol
 * this library also defines (MLX's, replaced here) or one that only some MLX builds export (the
 * CUDA backend's). The handle stays open, as libmlx is loaded for as long as this library is.
 */
void* libmlx_symbol(const char* mangled);

/** The arrays of a list of mlx_array ctx addresses (none may be 0). */
inline std::vector<array> arrays_of(const uintptr_t* ctxs, size_t n, const char* what) {
  if (n && !ctxs) throw std::invalid_argument(std::string(what) + ": null array list");
  std::vector<array> v;
  v.reserve(n);
  for (size_t i = 0; i < n; i++) {
    if (!ctxs[i]) throw std::invalid_argument(std::string(what) + ": empty array handle at " + std::to_string(i));
    v.push_back(*reinterpret_cast<const array*>(ctxs[i]));
  }
  return v;
}

/** Wraps a vector of arrays in a new handle (the callee of a C callback owns nothing). */
inline mlx_vector_array new_vector(std::vector<array> v) { return mlx_vector_array{new std::vector<array>(std::move(v))}; }

/** Marks the calling thread as tracing a shapeless compile while it lives (transforms.cpp). */
struct ShapelessTrace {
  ShapelessTrace();
  ~ShapelessTrace();
  ShapelessTrace(const ShapelessTrace&) = delete;
  ShapelessTrace& operator=(const ShapelessTrace&) = delete;
};
/** Whether the calling thread is tracing a shapeless compile (its replays may change shapes). */
bool in_shapeless_trace();

/**
 * MLX ops behind checks (checked_ops.cpp) for arguments on which MLX crashes rather than throws;
 * the generated glue calls these (spec/ops.ts).
 */
namespace safe {
/** `g`, or an error naming `op` when it is not positive (MLX divides by it). */
int groups(int g, const char* op);
array take(const array& a, const array& indices, mx::Stream s);
array take(const array& a, const array& indices, int axis, mx::Stream s);
array take_along_axis(const array& a, const array& indices, int axis, mx::Stream s);
array as_strided(const array& a, const mx::Shape& shape, const mx::Strides& strides, size_t offset, mx::Stream s);
array floor_divide(const array& a, const array& b, mx::Stream s);
array remainder(const array& a, const array& b, mx::Stream s);
/**
 * Integer indices made int32 positions in one primitive (checked_ops.cpp): negative ones count from
 * the end (with `negative`), all clamped into [0, n - 1] for n = dims[0] or dims[j] per component j of
 * the last axis. {positions, bad ([1] bool: an index was out of range), [below, above] (int64)}.
 */
std::vector<array> bounded_indices(const array& indices, const std::vector<int64_t>& dims, bool negative, mx::Stream s);
}  // namespace safe

/**
 * The message of a failed allocation: MLX's "[malloc] Unable to allocate N bytes." where the
 * allocator threw it (alloc_guard.cpp), else the same prefix over what new threw, so that bindings
 * can tell an allocation failure from other errors.
 */
std::string alloc_message(const std::bad_alloc& e);

}  // namespace mlxc

// Every entry point: no C++ exception crosses the C ABI (an allocation failure included, and
// whatever is not a std::exception); each is reported through the handler and the entry point
// returns its error value.
#define MLXC_TRY try {
#define MLXC_CATCH(ret)                                          \
  }                                                              \
  catch (const std::bad_alloc& e) {                              \
    mlxc::raise(mlxc::alloc_message(e).c_str());                 \
    return ret;                                                  \
  }                                                              \
  catch (const std::exception& e) {                              \
    mlxc::raise(e.what());                                       \
    return ret;                                                  \
  }                                                              \
  catch (...) {                                                  \
    mlxc::raise("unknown C++ exception (not a std::exception)"); \
    return ret;                                                  \
  }
