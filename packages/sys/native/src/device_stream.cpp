// Devices and streams. Handles own copies of MLX's small Device/Stream values.
#include "mlxc_private.h"
#include "mlx/backend/cuda/cuda.h"
#include "mlx/backend/metal/metal.h"

namespace mx = mlx::core;

namespace {
mx::Device::DeviceType dev_type(mlx_device_type t) { return t == MLX_GPU ? mx::Device::gpu : mx::Device::cpu; }
template <typename T>
std::string to_string(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
}  // namespace

extern "C" {

mlx_device mlx_device_new(void) { return mlx_device{nullptr}; }
mlx_device mlx_device_new_type(mlx_device_type type, int index) {
  MLXC_TRY
  return mlx_device{new mx::Device(dev_type(type), index)};
  MLXC_CATCH(mlx_device{nullptr})
}
int mlx_device_free(mlx_device d) {
  delete static_cast<mx::Device*>(d.ctx);
  return 0;
}
int mlx_device_set(mlx_device* d, const mlx_device src) {
  MLXC_TRY
  mlxc::assign<mx::Device>(*d, mlxc::device(src));
  MLXC_CATCH(1)
  return 0;
}
int mlx_device_tostring(mlx_string* str, mlx_device d) {
  MLXC_TRY
  mlxc::assign<std::string>(*str, to_string(mlxc::device(d)));
  MLXC_CATCH(1)
  return 0;
}
bool mlx_device_equal(mlx_device a, mlx_device b) {
  if (!a.ctx || !b.ctx) return a.ctx == b.ctx;
  return mlxc::device(a) == mlxc::device(b);
}
int mlx_device_get_index(int* index, mlx_device d) {
  MLXC_TRY
  *index = mlxc::device(d).index;
  MLXC_CATCH(1)
  return 0;
}
int mlx_device_get_type(mlx_device_type* type, mlx_device d) {
  MLXC_TRY
  *type = mlxc::device(d).type == mx::Device::gpu ? MLX_GPU : MLX_CPU;
  MLXC_CATCH(1)
  return 0;
}
int mlx_get_default_device(mlx_device* d) {
  MLXC_TRY
  mlxc::assign<mx::Device>(*d, mx::default_device());
  MLXC_CATCH(1)
  return 0;
}
int mlx_set_default_device(mlx_device d) {
  MLXC_TRY
  mx::set_default_device(mlxc::device(d));
  MLXC_CATCH(1)
  return 0;
}
int mlx_device_is_available(bool* avail, mlx_device d) {
  MLXC_TRY
  *avail = mx::is_available(mlxc::device(d));
  MLXC_CATCH(1)
  return 0;
}
int mlx_device_count(int* count, mlx_device_type type) {
  MLXC_TRY
  *count = mx::device_count(dev_type(type));
  MLXC_CATCH(1)
  return 0;
}
int mlx_metal_is_available(bool* res) {
  MLXC_TRY
  *res = mx::metal::is_available();
  MLXC_CATCH(1)
  return 0;
}
int mlx_cuda_is_available(bool* res) {
  MLXC_TRY
  *res = mx::cu::is_available();
  MLXC_CATCH(1)
  return 0;
}

mlx_stream mlx_stream_new(void) { return mlx_stream{nullptr}; }
mlx_stream mlx_stream_new_device(mlx_device d) {
  try {
    return mlx_stream{new mx::Stream(mx::new_stream(mlxc::device(d)))};
  } catch (const std::exception& e) {
    mlxc::raise(e.what());
    return mlx_stream{nullptr};
  }
}
int mlx_stream_set(mlx_stream* s, const mlx_stream src) {
  MLXC_TRY
  mlxc::assign<mx::Stream>(*s, mlxc::stream(src));
  MLXC_CATCH(1)
  return 0;
}
int mlx_stream_free(mlx_stream s) {
  delete static_cast<mx::Stream*>(s.ctx);
  return 0;
}
int mlx_stream_tostring(mlx_string* str, mlx_stream s) {
  MLXC_TRY
  mlxc::assign<std::string>(*str, to_string(mlxc::stream(s)));
  MLXC_CATCH(1)
  return 0;
}
bool mlx_stream_equal(mlx_stream a, mlx_stream b) {
  if (!a.ctx || !b.ctx) return a.ctx == b.ctx;
  return mlxc::stream(a) == mlxc::stream(b);
}
int mlx_stream_get_device(mlx_device* d, mlx_stream s) {
  MLXC_TRY
  mlxc::assign<mx::Device>(*d, mlxc::stream(s).device);
  MLXC_CATCH(1)
  return 0;
}
int mlx_stream_get_index(int* index, mlx_stream s) {
  MLXC_TRY
  *index = mlxc::stream(s).index;
  MLXC_CATCH(1)
  return 0;
}
int mlx_synchronize(mlx_stream s) {
  MLXC_TRY
  mx::synchronize(mlxc::stream(s));
  MLXC_CATCH(1)
  return 0;
}
int mlx_get_default_stream(mlx_stream* s, mlx_device d) {
  MLXC_TRY
  mlxc::assign<mx::Stream>(*s, mx::default_stream(mlxc::device(d)));
  MLXC_CATCH(1)
  return 0;
}
int mlx_set_default_stream(mlx_stream s) {
  MLXC_TRY
  mx::set_default_stream(mlxc::stream(s));
  MLXC_CATCH(1)
  return 0;
}
mlx_stream mlx_default_cpu_stream_new(void) {
  try {
    return mlx_stream{new mx::Stream(mx::default_stream(mx::Device(mx::Device::cpu)))};
  } catch (const std::exception& e) {
    mlxc::raise(e.what());
    return mlx_stream{nullptr};
  }
}
mlx_stream mlx_default_gpu_stream_new(void) {
  try {
    return mlx_stream{new mx::Stream(mx::default_stream(mx::Device(mx::Device::gpu)))};
  } catch (const std::exception& e) {
    mlxc::raise(e.what());
    return mlx_stream{nullptr};
  }
}

}  // extern "C"
