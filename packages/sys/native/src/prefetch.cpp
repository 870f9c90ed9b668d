// Moving an evaluated array's unified memory to the host or the GPU in one transfer, on MLX's CUDA
// build (spec/extensions/transfer.ts; the copies in and out are in transfer.cpp).
#include <dlfcn.h>

#include "mlxc_private.h"

namespace mx = mlx::core;
using mlxc::array;

namespace {

// CUDA's driver API, resolved at run time: MLX's CUDA build loads libcuda.so.1, the CPU build does
// not, and this library is built against the CPU build's headers. cuMemPrefetchAsync_v2 (CUDA 12.2
// and later drivers) takes the destination as a CUmemLocation.
struct CuMemLocation {
  int type;  // CU_MEM_LOCATION_TYPE_DEVICE = 1, CU_MEM_LOCATION_TYPE_HOST = 2
  int id;
};
using CuPrefetch = int (*)(unsigned long long ptr, size_t count, CuMemLocation location, unsigned int flags, void* stream);
using CuStreamSync = int (*)(void* stream);

struct CudaDriver {
  CuPrefetch prefetch = nullptr;
  CuStreamSync sync = nullptr;
};

const CudaDriver& cuda_driver() {
  static CudaDriver d = [] {
    CudaDriver r;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) return r;
    r.prefetch = reinterpret_cast<CuPrefetch>(dlsym(lib, "cuMemPrefetchAsync_v2"));
    r.sync = reinterpret_cast<CuStreamSync>(dlsym(lib, "cuStreamSynchronize"));
    if (!r.prefetch || !r.sync) r = CudaDriver{};
    return r;
  }();
  return d;
}

}  // namespace

namespace mlxc {

bool prefetch(const array& a, bool to_host) {
  const auto& d = cuda_driver();
  if (!d.prefetch || !a.is_available() || a.nbytes() == 0) return false;
  // Device memory (mlxc_array_new_data_on's, or a kernel's result): already on the GPU, and asking
  // for its host pointer would move it to unified memory; mlxc_array_read copies it out directly.
  if (buffer_device(a) >= 0) return false;
  // raw_ptr() hands out the buffer's unified (managed) pointer, first copying a GPU-only buffer
  // into one; the whole buffer moves (a view may start inside it).
  auto buf = a.buffer();
  void* p = buf.raw_ptr();
  size_t n = a.buffer_size();
  if (!p || !n) return false;
  CuMemLocation loc{to_host ? 2 : 1, 0};
  if (d.prefetch(reinterpret_cast<unsigned long long>(p), n, loc, 0, nullptr) != 0) return false;
  return d.sync(nullptr) == 0;
}

}  // namespace mlxc

extern "C" {

int mlxc_array_prefetch(bool* moved, const mlx_array arr, bool to_host) {
  MLXC_TRY
  *moved = mlxc::prefetch(mlxc::arr(arr), to_host);
  MLXC_CATCH(1)
  return 0;
}

}  // extern "C"
