// Arrays: constructors, setters, metadata and data access. Data accessors do not evaluate (as in
// mlx-c); callers evaluate first. float16/bfloat16 data is read through the uint16 accessor.
#include <cstdlib>

#include "mlxc_private.h"

using mlxc::arr;
using mlxc::array;
namespace mx = mlx::core;

mx::Dtype mlxc::dtype(mlx_dtype t) {
  switch (t) {
    case MLX_BOOL: return mx::bool_;
    case MLX_UINT8: return mx::uint8;
    case MLX_UINT16: return mx::uint16;
    case MLX_UINT32: return mx::uint32;
    case MLX_UINT64: return mx::uint64;
    case MLX_INT8: return mx::int8;
    case MLX_INT16: return mx::int16;
    case MLX_INT32: return mx::int32;
    case MLX_INT64: return mx::int64;
    case MLX_FLOAT16: return mx::float16;
    case MLX_FLOAT32: return mx::float32;
    case MLX_FLOAT64: return mx::float64;
    case MLX_BFLOAT16: return mx::bfloat16;
    case MLX_COMPLEX64: return mx::complex64;
  }
  throw std::invalid_argument("unknown mlx_dtype " + std::to_string(static_cast<int>(t)));
}

mlx_dtype mlxc::to_c(mx::Dtype t) {
  switch (t.val()) {
    case mx::Dtype::Val::bool_: return MLX_BOOL;
    case mx::Dtype::Val::uint8: return MLX_UINT8;
    case mx::Dtype::Val::uint16: return MLX_UINT16;
    case mx::Dtype::Val::uint32: return MLX_UINT32;
    case mx::Dtype::Val::uint64: return MLX_UINT64;
    case mx::Dtype::Val::int8: return MLX_INT8;
    case mx::Dtype::Val::int16: return MLX_INT16;
    case mx::Dtype::Val::int32: return MLX_INT32;
    case mx::Dtype::Val::int64: return MLX_INT64;
    case mx::Dtype::Val::float16: return MLX_FLOAT16;
    case mx::Dtype::Val::float32: return MLX_FLOAT32;
    case mx::Dtype::Val::float64: return MLX_FLOAT64;
    case mx::Dtype::Val::bfloat16: return MLX_BFLOAT16;
    case mx::Dtype::Val::complex64: return MLX_COMPLEX64;
  }
  return MLX_FLOAT32;
}

namespace {
mx::Shape to_shape(const int* shape, int dim) {
  if (dim < 0) throw std::invalid_argument("negative number of dimensions");
  if (dim > 0 && !shape) throw std::invalid_argument("null shape with a non-zero number of dimensions");
  for (int i = 0; i < dim; i++)
    if (shape[i] < 0) throw std::invalid_argument("negative dimension " + std::to_string(shape[i]) + " in shape");
  return mx::Shape(shape, shape + dim);
}

array copy_data(const void* data, const int* shape, int dim, mlx_dtype t) {
  auto sh = to_shape(shape, dim);
  auto dt = mlxc::dtype(t);
  size_t n = 1;
  for (auto d : sh) n *= static_cast<size_t>(d);
  size_t nbytes = n * mx::size_of(dt);
  if (nbytes > 0 && !data) throw std::invalid_argument("null data for a non-empty array");
  void* buf = std::malloc(nbytes > 0 ? nbytes : 1);
  if (!buf) throw std::bad_alloc();
  if (nbytes) std::memcpy(buf, data, nbytes);
  return array(buf, std::move(sh), dt, [](void* p) { std::free(p); });
}

// Constructors return a handle and cannot return an error code: on failure the error is reported
// and an empty handle is returned.
template <typename F>
mlx_array make(F&& f) {
  try {
    return mlx_array{new array(f())};
  } catch (const std::exception& e) {
    mlxc::raise(e.what());
    return mlx_array{nullptr};
  }
}

template <typename T>
int item(T* res, mlx_array a) {
  MLXC_TRY
  array x = arr(a);  // the non-const item() evaluates first
  *res = x.item<T>();
  MLXC_CATCH(1)
  return 0;
}

template <typename T>
const T* data(mlx_array a) {
  try {
    return arr(a).data<T>();
  } catch (const std::exception& e) {
    mlxc::raise(e.what());
    return nullptr;
  }
}
}  // namespace

extern "C" {

size_t mlx_dtype_size(mlx_dtype t) {
  try {
    return mx::size_of(mlxc::dtype(t));
  } catch (const std::exception& e) {
    mlxc::raise(e.what());
    return 0;
  }
}

int mlx_array_tostring(mlx_string* str, const mlx_array a) {
  MLXC_TRY
  std::ostringstream os;
  os << arr(a);
  mlxc::assign<std::string>(*str, os.str());
  MLXC_CATCH(1)
  return 0;
}

mlx_array mlx_array_new(void) { return mlx_array{nullptr}; }
int mlx_array_free(mlx_array a) {
  delete static_cast<array*>(a.ctx);
  return 0;
}
mlx_array mlx_array_new_bool(bool v) {
  return make([&] { return array(v); });
}
mlx_array mlx_array_new_int(int v) {
  return make([&] { return array(v); });
}
mlx_array mlx_array_new_float32(float v) {
  return make([&] { return array(v); });
}
mlx_array mlx_array_new_float(float v) {
  return make([&] { return array(v); });
}
mlx_array mlx_array_new_float64(double v) {
  return make([&] { return array(v, mx::float64); });
}
mlx_array mlx_array_new_double(double v) {
  return make([&] { return array(v, mx::float64); });
}
mlx_array mlx_array_new_complex(float re, float im) {
  return make([&] { return array(std::complex<float>(re, im)); });
}
mlx_array mlx_array_new_data(const void* data, const int* shape, int dim, mlx_dtype t) {
  return make([&] { return copy_data(data, shape, dim, t); });
}
mlx_array mlx_array_new_data_managed(void* data, const int* shape, int dim, mlx_dtype t, mlx_data_dtor dtor) {
  return make([&] {
    return array(data, to_shape(shape, dim), mlxc::dtype(t), [dtor](void* p) {
      if (dtor) dtor(p);
    });
  });
}
mlx_array mlx_array_new_data_managed_payload(void* data, const int* shape, int dim, mlx_dtype t, void* payload, mlx_data_dtor dtor) {
  return make([&] {
    return array(data, to_shape(shape, dim), mlxc::dtype(t), [dtor, payload](void*) {
      if (dtor) dtor(payload);
    });
  });
}

int mlx_array_set(mlx_array* a, const mlx_array src) {
  MLXC_TRY
  mlxc::set(*a, arr(src));
  MLXC_CATCH(1)
  return 0;
}
#define MLXC_SET_SCALAR(suffix, T, expr)            \
  int mlx_array_set_##suffix(mlx_array* a, T val) { \
    MLXC_TRY                                        \
    mlxc::set(*a, expr);                            \
    MLXC_CATCH(1)                                   \
    return 0;                                       \
  }
MLXC_SET_SCALAR(bool, bool, array(val))
MLXC_SET_SCALAR(int, int, array(val))
MLXC_SET_SCALAR(float32, float, array(val))
MLXC_SET_SCALAR(float, float, array(val))
MLXC_SET_SCALAR(float64, double, array(val, mx::float64))
MLXC_SET_SCALAR(double, double, array(val, mx::float64))
#undef MLXC_SET_SCALAR
int mlx_array_set_complex(mlx_array* a, float re, float im) {
  MLXC_TRY
  mlxc::set(*a, array(std::complex<float>(re, im)));
  MLXC_CATCH(1)
  return 0;
}
int mlx_array_set_data(mlx_array* a, const void* data, const int* shape, int dim, mlx_dtype t) {
  MLXC_TRY
  mlxc::set(*a, copy_data(data, shape, dim, t));
  MLXC_CATCH(1)
  return 0;
}

size_t mlx_array_itemsize(const mlx_array a) { return a.ctx ? arr(a).itemsize() : 0; }
size_t mlx_array_size(const mlx_array a) { return a.ctx ? arr(a).size() : 0; }
size_t mlx_array_nbytes(const mlx_array a) { return a.ctx ? arr(a).nbytes() : 0; }
size_t mlx_array_ndim(const mlx_array a) { return a.ctx ? arr(a).ndim() : 0; }
const int* mlx_array_shape(const mlx_array a) { return a.ctx ? arr(a).shape().data() : nullptr; }
const size_t* mlx_array_strides(const mlx_array a) {
  static_assert(sizeof(int64_t) == sizeof(size_t), "strides are exposed as size_t");
  return a.ctx ? reinterpret_cast<const size_t*>(arr(a).strides().data()) : nullptr;
}
int mlx_array_dim(const mlx_array a, int dim) {
  try {
    return arr(a).shape(dim);
  } catch (const std::exception& e) {
    mlxc::raise(e.what());
    return 0;
  }
}
mlx_dtype mlx_array_dtype(const mlx_array a) { return a.ctx ? mlxc::to_c(arr(a).dtype()) : MLX_FLOAT32; }
int mlx_array_eval(mlx_array a) {
  MLXC_TRY
  mlx::core::eval(arr(a));
  MLXC_CATCH(1)
  return 0;
}

int mlx_array_item_bool(bool* r, const mlx_array a) { return item(r, a); }
int mlx_array_item_uint8(uint8_t* r, const mlx_array a) { return item(r, a); }
int mlx_array_item_uint16(uint16_t* r, const mlx_array a) { return item(r, a); }
int mlx_array_item_uint32(uint32_t* r, const mlx_array a) { return item(r, a); }
int mlx_array_item_uint64(uint64_t* r, const mlx_array a) { return item(r, a); }
int mlx_array_item_int8(int8_t* r, const mlx_array a) { return item(r, a); }
int mlx_array_item_int16(int16_t* r, const mlx_array a) { return item(r, a); }
int mlx_array_item_int32(int32_t* r, const mlx_array a) { return item(r, a); }
int mlx_array_item_int64(int64_t* r, const mlx_array a) { return item(r, a); }
int mlx_array_item_float32(float* r, const mlx_array a) { return item(r, a); }
int mlx_array_item_float64(double* r, const mlx_array a) { return item(r, a); }
int mlx_array_item_complex64(mlx_complex64_t* r, const mlx_array a) { return item(r, a); }

const bool* mlx_array_data_bool(const mlx_array a) { return data<bool>(a); }
const uint8_t* mlx_array_data_uint8(const mlx_array a) { return data<uint8_t>(a); }
const uint16_t* mlx_array_data_uint16(const mlx_array a) { return data<uint16_t>(a); }
const uint32_t* mlx_array_data_uint32(const mlx_array a) { return data<uint32_t>(a); }
const uint64_t* mlx_array_data_uint64(const mlx_array a) { return data<uint64_t>(a); }
const int8_t* mlx_array_data_int8(const mlx_array a) { return data<int8_t>(a); }
const int16_t* mlx_array_data_int16(const mlx_array a) { return data<int16_t>(a); }
const int32_t* mlx_array_data_int32(const mlx_array a) { return data<int32_t>(a); }
const int64_t* mlx_array_data_int64(const mlx_array a) { return data<int64_t>(a); }
const float* mlx_array_data_float32(const mlx_array a) { return data<float>(a); }
const double* mlx_array_data_float64(const mlx_array a) { return data<double>(a); }
const mlx_complex64_t* mlx_array_data_complex64(const mlx_array a) { return data<std::complex<float>>(a); }

int _mlx_array_is_available(bool* res, const mlx_array a) {
  MLXC_TRY
  *res = arr(a).is_available();
  MLXC_CATCH(1)
  return 0;
}
int _mlx_array_wait(const mlx_array a) {
  MLXC_TRY
  const_cast<array&>(arr(a)).wait();
  MLXC_CATCH(1)
  return 0;
}
int _mlx_array_is_contiguous(bool* res, const mlx_array a) {
  MLXC_TRY
  *res = arr(a).flags().contiguous;
  MLXC_CATCH(1)
  return 0;
}
int _mlx_array_is_row_contiguous(bool* res, const mlx_array a) {
  MLXC_TRY
  *res = arr(a).flags().row_contiguous;
  MLXC_CATCH(1)
  return 0;
}
int _mlx_array_is_col_contiguous(bool* res, const mlx_array a) {
  MLXC_TRY
  *res = arr(a).flags().col_contiguous;
  MLXC_CATCH(1)
  return 0;
}

}  // extern "C"
