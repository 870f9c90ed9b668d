// Host <-> GPU transfers on MLX's CUDA build (see spec/extensions/transfer.ts).
//
// MLX's CUDA allocator gives arrays made from host data unified (managed) memory: the host writes
// it page by page, then the first kernel to read it migrates it page fault by page fault, at a
// fraction of the bus's speed; results, computed into device memory, are copied into fresh unified
// memory when the host asks for their pointer, and fault back page by page when it reads them.
// Here feeds are copied straight into device memory and results straight out of it, with the
// driver's copy engine, through a ring of pinned staging buffers (or from the caller's pageable
// memory, or the caller's memory pinned for the copy: MLXC_TRANSFER picks, for measurements).
//
// This library is built against MLX's CPU build, so CUDA's driver API is resolved at run time from
// the libcuda.so.1 that MLX's CUDA build has loaded; without it every function here falls back to
// plain host copies. CudaBuffer mirrors mlx/backend/cuda/allocator.h of the pinned MLX version:
// an allocator::Buffer of that build points to one.
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "mlx/backend/cuda/cuda.h"
#include "eval.h"
#include "mlxc_private.h"

namespace mx = mlx::core;
using mlxc::array;

namespace {

struct CudaBuffer {
  void* data;
  size_t size;
  int device;  // -1: unified (managed) memory
};

using CUresult = int;
using CUdeviceptr = unsigned long long;
using CUstream = void*;
using CUcontext = void*;
using CUevent = void*;

struct Driver {
  bool ok = false;
  CUresult (*ctx_get)(CUcontext*) = nullptr;
  CUresult (*ctx_set)(CUcontext) = nullptr;
  CUresult (*primary_ctx)(CUcontext*, int) = nullptr;
  CUresult (*device_get)(int*, int) = nullptr;
  CUresult (*stream_create)(CUstream*, unsigned) = nullptr;
  CUresult (*stream_sync)(CUstream) = nullptr;
  CUresult (*alloc_async)(CUdeviceptr*, size_t, CUstream) = nullptr;
  CUresult (*free_async)(CUdeviceptr, CUstream) = nullptr;
  CUresult (*free)(CUdeviceptr) = nullptr;
  CUresult (*htod_async)(CUdeviceptr, const void*, size_t, CUstream) = nullptr;
  CUresult (*dtoh_async)(void*, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*host_alloc)(void**, size_t, unsigned) = nullptr;
  CUresult (*host_free)(void*) = nullptr;
  CUresult (*host_register)(void*, size_t, unsigned) = nullptr;
  CUresult (*host_unregister)(void*) = nullptr;
  CUresult (*event_create)(CUevent*, unsigned) = nullptr;
  CUresult (*event_record)(CUevent, CUstream) = nullptr;
  CUresult (*event_sync)(CUevent) = nullptr;
  CUresult (*error_string)(CUresult, const char**) = nullptr;
};

const Driver& driver() {
  static Driver d = [] {
    Driver r;
    bool cuda = false;
    try {
      cuda = mx::cu::is_available();
    } catch (...) {}
    if (!cuda) return r;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) return r;
    bool all = true;
    auto sym = [&](auto& f, const char* name) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(lib, name));
      all = all && f;
    };
    sym(r.ctx_get, "cuCtxGetCurrent");
    sym(r.ctx_set, "cuCtxSetCurrent");
    sym(r.primary_ctx, "cuDevicePrimaryCtxRetain");
    sym(r.device_get, "cuDeviceGet");
    sym(r.stream_create, "cuStreamCreate");
    sym(r.stream_sync, "cuStreamSynchronize");
    sym(r.alloc_async, "cuMemAllocAsync");
    sym(r.free_async, "cuMemFreeAsync");
    sym(r.free, "cuMemFree_v2");
    sym(r.htod_async, "cuMemcpyHtoDAsync_v2");
    sym(r.dtoh_async, "cuMemcpyDtoHAsync_v2");
    sym(r.host_alloc, "cuMemHostAlloc");
    sym(r.host_free, "cuMemFreeHost");
    sym(r.host_register, "cuMemHostRegister_v2");
    sym(r.host_unregister, "cuMemHostUnregister");
    sym(r.event_create, "cuEventCreate");
    sym(r.event_record, "cuEventRecord");
    sym(r.event_sync, "cuEventSynchronize");
    sym(r.error_string, "cuGetErrorString");
    r.ok = all;
    return r;
  }();
  return d;
}

void cu_check(CUresult rc, const char* what) {
  if (rc == 0) return;
  const char* s = nullptr;
  if (driver().error_string) driver().error_string(rc, &s);
  throw std::runtime_error(std::string("[transfer] ") + what + " failed: " + (s ? s : "CUDA error ") + " (" + std::to_string(rc) + ")");
}

enum class Mode { unified, staged, pageable, pinned };

/** MLXC_TRANSFER: staged (the default), pageable, pinned or unified (MLX's own path). */
Mode mode() {
  const char* m = std::getenv("MLXC_TRANSFER");
  if (!m || !*m || !std::strcmp(m, "staged")) return Mode::staged;
  if (!std::strcmp(m, "pageable")) return Mode::pageable;
  if (!std::strcmp(m, "pinned")) return Mode::pinned;
  if (!std::strcmp(m, "unified")) return Mode::unified;
  throw std::invalid_argument(std::string("MLXC_TRANSFER=") + m + ": expected staged, pageable, pinned or unified");
}

/** Smaller transfers stay on MLX's path: unified memory costs less than a synchronised copy there. */
constexpr size_t kMinBytes = 256 << 10;
/** Host ranges below this are left to fault in as they are written (see populate_host). */
constexpr size_t kPopulateMinBytes = 1 << 20;
constexpr size_t kChunk = 8 << 20;
constexpr int kSlots = 4;

/** Makes `ctx` current on this thread for the scope, restoring the previous one after. */
struct CtxScope {
  CUcontext prev = nullptr;
  bool changed = false;
  explicit CtxScope(CUcontext ctx) {
    cu_check(driver().ctx_get(&prev), "cuCtxGetCurrent");
    if (prev != ctx) {
      cu_check(driver().ctx_set(ctx), "cuCtxSetCurrent");
      changed = true;
    }
  }
  ~CtxScope() {
    if (changed) driver().ctx_set(prev);
  }
};

}  // namespace

namespace mlxc {
/** memcpy over several threads: one core's copy rate is below the bus's. */
void copy_host(void* dst, const void* src, size_t n) {
  constexpr size_t kPart = 2 << 20;
  unsigned threads = std::min<unsigned>(4, std::max<size_t>(1, n / kPart));
  if (threads <= 1) {
    std::memcpy(dst, src, n);
    return;
  }
  size_t per = (n + threads - 1) / threads;
  std::thread pool[4];
  for (unsigned t = 1; t < threads; t++) {
    size_t off = t * per;
    size_t len = off >= n ? 0 : std::min(per, n - off);
    pool[t] = std::thread([=] { std::memcpy(static_cast<char*>(dst) + off, static_cast<const char*>(src) + off, len); });
  }
  std::memcpy(dst, src, std::min(per, n));
  for (unsigned t = 1; t < threads; t++) pool[t].join();
}
}  // namespace mlxc

namespace {
using mlxc::copy_host;

void prefault(void* dst, size_t n, bool huge = true);
bool in_pinned_block(const void* p, size_t n);
bool on_cuda();

/** Per GPU: its primary context, a stream of ours, and the pinned staging ring. */
struct Gpu {
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  void* pinned[kSlots] = {};
  CUevent done[kSlots] = {};
  std::mutex m;  // one staged transfer at a time uses the ring

  explicit Gpu(int index) {
    const auto& d = driver();
    int dev = 0;
    cu_check(d.device_get(&dev, index), "cuDeviceGet");
    cu_check(d.primary_ctx(&ctx, dev), "cuDevicePrimaryCtxRetain");
    CtxScope scope(ctx);
    cu_check(d.stream_create(&stream, 1 /* CU_STREAM_NON_BLOCKING */), "cuStreamCreate");
  }
  void ensure_ring() {
    if (pinned[0]) return;
    for (int i = 0; i < kSlots; i++) {
      cu_check(driver().host_alloc(&pinned[i], kChunk, 0), "cuMemHostAlloc");
      cu_check(driver().event_create(&done[i], 2 /* CU_EVENT_DISABLE_TIMING */), "cuEventCreate");
    }
  }

  void upload(CUdeviceptr dst, const void* src, size_t n, Mode how) {
    const auto& d = driver();
    if (how == Mode::pageable || in_pinned_block(src, n)) {
      // From pageable memory the driver stages the copy itself; from a page-locked block of
      // mlxc_host_alloc the copy engine reads it directly.
      cu_check(d.htod_async(dst, src, n, stream), "cuMemcpyHtoDAsync");
    } else if (how == Mode::pinned) {
      void* p = const_cast<void*>(src);
      bool registered = d.host_register(p, n, 0) == 0;
      cu_check(d.htod_async(dst, src, n, stream), "cuMemcpyHtoDAsync");
      cu_check(d.stream_sync(stream), "cuStreamSynchronize");
      if (registered) d.host_unregister(p);
    } else {
      std::lock_guard<std::mutex> lk(m);
      ensure_ring();
      size_t i = 0;
      for (size_t off = 0; off < n; off += kChunk, i++) {
        int s = static_cast<int>(i % kSlots);
        size_t len = std::min(kChunk, n - off);
        if (i >= kSlots) cu_check(d.event_sync(done[s]), "cuEventSynchronize");
        copy_host(pinned[s], static_cast<const char*>(src) + off, len);
        cu_check(d.htod_async(dst + off, pinned[s], len, stream), "cuMemcpyHtoDAsync");
        cu_check(d.event_record(done[s], stream), "cuEventRecord");
      }
    }
    cu_check(d.stream_sync(stream), "cuStreamSynchronize");
  }

  void download(void* dst, CUdeviceptr src, size_t n, Mode how) {
    const auto& d = driver();
    if (in_pinned_block(dst, n)) {
      // A page-locked block of mlxc_host_alloc: its pages exist and are locked, the copy engine
      // writes them directly, at the bus's rate.
      cu_check(d.dtoh_async(dst, src, n, stream), "cuMemcpyDtoHAsync");
      cu_check(d.stream_sync(stream), "cuStreamSynchronize");
      return;
    }
    if (how == Mode::pageable || how == Mode::pinned) {
      prefault(dst, n);
      bool registered = how == Mode::pinned && d.host_register(dst, n, 0) == 0;
      cu_check(d.dtoh_async(dst, src, n, stream), "cuMemcpyDtoHAsync");
      cu_check(d.stream_sync(stream), "cuStreamSynchronize");
      if (registered) d.host_unregister(dst);
      return;
    }
    std::lock_guard<std::mutex> lk(m);
    ensure_ring();
    size_t chunks = (n + kChunk - 1) / kChunk;
    auto issue = [&](size_t i) {
      int s = static_cast<int>(i % kSlots);
      size_t off = i * kChunk;
      cu_check(d.dtoh_async(pinned[s], src + off, std::min(kChunk, n - off), stream), "cuMemcpyDtoHAsync");
      cu_check(d.event_record(done[s], stream), "cuEventRecord");
    };
    for (size_t i = 0; i < std::min<size_t>(kSlots, chunks); i++) issue(i);
    // The destination's pages are populated while the first chunks cross the bus.
    prefault(dst, n);
    for (size_t i = 0; i < chunks; i++) {
      int s = static_cast<int>(i % kSlots);
      size_t off = i * kChunk;
      cu_check(d.event_sync(done[s]), "cuEventSynchronize");
      copy_host(static_cast<char*>(dst) + off, pinned[s], std::min(kChunk, n - off));
      if (i + kSlots < chunks) issue(i + kSlots);
    }
  }
};

Gpu& gpu(int index) {
  static std::mutex m;
  // Never freed: buffers may be released by MLX's threads during static destruction.
  static auto* gpus = new std::map<int, Gpu*>();
  std::lock_guard<std::mutex> lk(m);
  auto it = gpus->find(index);
  if (it == gpus->end()) it = gpus->emplace(index, new Gpu(index)).first;
  return *it->second;
}

/**
 * A device buffer that MLX's kernels read like their own (CudaBuffer with a device index). It is
 * not MLX's to reuse (allocator::Data with a deleter is not "owned", so never donated). If MLX
 * asks for its host pointer, MLX itself moves it to unified memory (cudaFreeAsync of our
 * stream-ordered allocation, device -1): the deleter frees whichever it holds.
 */
array device_array(const void* data, size_t nbytes, mx::Shape shape, mx::Dtype dt, int index, Mode how) {
  const auto& d = driver();
  Gpu& g = gpu(index);
  CtxScope scope(g.ctx);
  CUdeviceptr p = 0;
  cu_check(d.alloc_async(&p, nbytes, g.stream), "cuMemAllocAsync");
  try {
    g.upload(p, data, nbytes, how);
  } catch (...) {
    d.free_async(p, g.stream);
    throw;
  }
  auto* buf = new CudaBuffer{reinterpret_cast<void*>(p), nbytes, index};
  mx::allocator::Data owned(mx::allocator::Buffer(buf), [](mx::allocator::Buffer b) {
    auto* cb = static_cast<CudaBuffer*>(b.ptr());
    const auto& drv = driver();
    // Runs in destructors (and at exit, when the driver may be gone): nothing may throw.
    try {
      Gpu& gg = gpu(cb->device < 0 ? 0 : cb->device);
      CtxScope sc(gg.ctx);
      if (cb->device >= 0)
        drv.free_async(reinterpret_cast<CUdeviceptr>(cb->data), gg.stream);
      else
        drv.free(reinterpret_cast<CUdeviceptr>(cb->data));
    } catch (...) {}
    delete cb;
  });
  return array(std::move(owned), std::move(shape), dt);
}

bool on_cuda() { return driver().ok; }

/**
 * A fresh destination (a new TypedArray) has no pages yet: writing it faults them in one by one,
 * which bounds a download far below the bus. Ask the kernel to populate them in one call instead
 * (MADV_POPULATE_WRITE, Linux 5.14; elsewhere a no-op), on huge pages where it allows. The kernel
 * zeroes each page it populates at one core's memory bandwidth, so large destinations are split
 * over several threads. MLXC_PREFAULT picks the way, for measurements: parallel (the default),
 * single (one call), touch (threads write a byte per page) or none.
 */
enum class Prefault { parallel, single, touch, none };

Prefault prefault_mode() {
  const char* m = std::getenv("MLXC_PREFAULT");
  if (!m || !*m || !std::strcmp(m, "parallel")) return Prefault::parallel;
  if (!std::strcmp(m, "single")) return Prefault::single;
  if (!std::strcmp(m, "touch")) return Prefault::touch;
  if (!std::strcmp(m, "none")) return Prefault::none;
  throw std::invalid_argument(std::string("MLXC_PREFAULT=") + m + ": expected parallel, single, touch or none");
}

void populate(uintptr_t lo, uintptr_t hi, Prefault how, uintptr_t page) {
  if (how == Prefault::touch) {
    for (uintptr_t p = lo; p < hi; p += page) *reinterpret_cast<volatile char*>(p) = 0;
    return;
  }
#ifdef __linux__
  // EINVAL before Linux 5.14: the copy then faults the pages in as it goes.
  madvise(reinterpret_cast<void*>(lo), hi - lo, 23 /* MADV_POPULATE_WRITE */);
#endif
}

void prefault(void* dst, size_t n, bool huge) {
#ifdef __linux__
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  Prefault how = prefault_mode();
  if (how == Prefault::none) return;
  uintptr_t lo = (reinterpret_cast<uintptr_t>(dst) + page - 1) & ~(page - 1);
  uintptr_t hi = (reinterpret_cast<uintptr_t>(dst) + n) & ~(page - 1);
  if (hi <= lo) return;
  // Once, over the whole range, before any thread populates: a flag change splits the mapping,
  // which must not race with the threads' population.
  if (huge) madvise(reinterpret_cast<void*>(lo), hi - lo, 14 /* MADV_HUGEPAGE */);
  constexpr uintptr_t kSlice = 8 << 20;  // below this, a thread costs more than it saves
  constexpr unsigned kMaxThreads = 8;
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  unsigned threads = how == Prefault::single ? 1 : static_cast<unsigned>(std::min<uintptr_t>({kMaxThreads, cores, (hi - lo) / kSlice}));
  if (threads <= 1) {
    populate(lo, hi, how, page);
    return;
  }
  // Slices on 2 MiB boundaries, so that no huge page is split between threads.
  constexpr uintptr_t kHuge = 2 << 20;
  uintptr_t per = (((hi - lo) / threads) + kHuge - 1) & ~(kHuge - 1);
  uintptr_t first = std::min(hi, ((lo + per) + kHuge - 1) & ~(kHuge - 1));
  std::thread pool[kMaxThreads];
  unsigned started = 0;
  for (uintptr_t a = first; a < hi && started < kMaxThreads; a += per) {
    uintptr_t b = std::min(hi, a + per);
    pool[started++] = std::thread([=] { populate(a, b, how, page); });
  }
  populate(lo, first, how, page);
  for (unsigned t = 0; t < started; t++) pool[t].join();
#else
  (void)dst;
  (void)n;
  (void)huge;
#endif
}

/**
 * Host blocks of mlxc_host_alloc: address -> (bytes, page-locked). Reads into a page-locked block
 * and uploads from one skip the staging ring; mlxc_host_free refuses any other pointer.
 */
struct HostBlock {
  size_t nbytes;
  bool pinned;
};
std::mutex& host_mutex() {
  static auto* m = new std::mutex();
  return *m;
}
std::map<uintptr_t, HostBlock>& host_blocks() {
  static auto* blocks = new std::map<uintptr_t, HostBlock>();
  return *blocks;
}

/** Whether [p, p + n) lies inside one page-locked block of mlxc_host_alloc. */
bool in_pinned_block(const void* p, size_t n) {
  if (!p || !on_cuda()) return false;
  auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lk(host_mutex());
  auto& blocks = host_blocks();
  auto it = blocks.upper_bound(a);
  if (it == blocks.begin()) return false;
  --it;
  return it->second.pinned && a >= it->first && n <= it->second.nbytes && a - it->first <= it->second.nbytes - n;
}

}  // namespace

namespace mlxc {
void populate_host(void* p, size_t n) {
  // Below a few pages the faults cost less than the call; huge pages are not asked for: where
  // memory is fragmented the kernel compacts it first, which took over a second on a 600 MB range.
  if (n >= kPopulateMinBytes) prefault(p, n, false);
}

mx::Stream read_stream(const array& a, const mx::Stream& s) {
  return a.dtype() == mx::float64 && s.device == mx::Device::gpu ? mx::default_stream(mx::Device::cpu) : s;
}

/** The CUDA device index an evaluated array's buffer lives on, -1 for unified or host memory. */
int buffer_device(const array& a) {
  if (!on_cuda() || !a.buffer().ptr() || a.nbytes() == 0) return -1;
  return static_cast<const CudaBuffer*>(a.buffer().ptr())->device;
}
}  // namespace mlxc

namespace mlxc {

size_t data_bytes(const void* data, const mx::Shape& sh, mx::Dtype dt) {
  size_t n = 1;
  for (auto v : sh) {
    if (v < 0) throw std::invalid_argument("negative dimension " + std::to_string(v) + " in shape");
    n *= static_cast<size_t>(v);
  }
  size_t nbytes = n * mx::size_of(dt);
  if (nbytes > 0 && !data) throw std::invalid_argument("null data for a non-empty array");
  return nbytes;
}

array new_data_on(const void* data, mx::Shape sh, mx::Dtype dt, mx::Stream s) {
  size_t nbytes = data_bytes(data, sh, dt);
  Mode how = mode();
  if (on_cuda() && s.device.type == mx::Device::gpu && how != Mode::unified && nbytes >= kMinBytes)
    return device_array(data, nbytes, std::move(sh), dt, s.device.index, how);
  if (!on_cuda() && nbytes >= kPopulateMinBytes) {
    // A model's weights, straight into MLX's own allocation (an array made from a pointer and a
    // deleter is copied again by MLX's CPU and Metal allocators, which cannot adopt memory): its
    // pages populated by one call, then copied on several threads. Faulting them in one by one as
    // the copy went took most of a large model's creation.
    auto d = mx::allocator::malloc(nbytes);
    void* buf = d.buffer().raw_ptr();
    populate_host(buf, nbytes);
    copy_host(buf, data, nbytes);
    return array(std::move(d), std::move(sh), dt);
  }
  void* buf = std::malloc(nbytes > 0 ? nbytes : 1);
  if (!buf) throw std::bad_alloc();
  if (nbytes) std::memcpy(buf, data, nbytes);
  return array(buf, std::move(sh), dt, [](void* p) { std::free(p); });
}

void read_into(void* dst, size_t nbytes, const array& a) {
  if (nbytes != a.nbytes())
    throw std::invalid_argument("mlxc_array_read: " + std::to_string(nbytes) + " bytes asked of an array of " + std::to_string(a.nbytes()));
  if (!a.flags().row_contiguous) throw std::invalid_argument("mlxc_array_read: the array is not row-contiguous");
  if (nbytes == 0) return;
  if (!dst) throw std::invalid_argument("mlxc_array_read: null destination");
  int dev = buffer_device(a);
  Mode how = mode();
  if (dev >= 0 && how != Mode::unified && nbytes >= kMinBytes) {
    Gpu& g = gpu(dev);
    CtxScope scope(g.ctx);
    auto* cb = static_cast<const CudaBuffer*>(a.buffer().ptr());
    g.download(dst, reinterpret_cast<CUdeviceptr>(cb->data) + static_cast<CUdeviceptr>(a.offset()), nbytes, how);
    return;
  }
  if (on_cuda() && how != Mode::unified && nbytes >= kMinBytes) {
    // Unified memory: one migration to the host rather than a page fault per page.
    prefetch(a, true);
  }
  std::memcpy(dst, a.data<char>(), nbytes);
}

}  // namespace mlxc

extern "C" {

int mlxc_array_new_data_on(mlx_array* res, const void* data, const int* shape, int dim, mlx_dtype dtype, const mlx_stream stream) {
  MLXC_TRY
  if (dim < 0 || (dim > 0 && !shape)) throw std::invalid_argument("mlxc_array_new_data_on: bad shape");
  mlxc::set(*res, mlxc::new_data_on(data, mx::Shape(shape, shape + dim), mlxc::dtype(dtype), mlxc::stream(stream)));
  MLXC_CATCH(1)
  return 0;
}

int mlxc_array_read(void* dst, size_t nbytes, const mlx_array arr) {
  MLXC_TRY
  auto a = mlxc::arr(arr);
  if (a.status() == array::Status::unscheduled) mlxc::eval_within({a}, 0, 0);
  a.wait();
  mlxc::read_into(dst, nbytes, a);
  MLXC_CATCH(1)
  return 0;
}

int mlxc_host_alloc(void** res, bool* pinned, size_t nbytes) {
  MLXC_TRY
  if (!res || !pinned) throw std::invalid_argument("mlxc_host_alloc: null result pointer");
  if (nbytes == 0) throw std::invalid_argument("mlxc_host_alloc: zero bytes");
  // Beyond what any allocator gives; also keeps page rounding from overflowing.
  if (nbytes > (size_t{1} << 46))
    throw std::invalid_argument("mlxc_host_alloc: " + std::to_string(nbytes) + " bytes is beyond any host memory");
  void* p = nullptr;
  bool locked = false;
  if (on_cuda()) {
    Gpu& g = gpu(0);
    CtxScope scope(g.ctx);
    // CU_MEMHOSTALLOC_PORTABLE: page-locked for every context, whichever GPU a stream uses.
    CUresult rc = driver().host_alloc(&p, nbytes, 1);
    if (rc == 2 /* CUDA_ERROR_OUT_OF_MEMORY */)
      throw std::runtime_error("mlxc_host_alloc: out of page-locked host memory for " + std::to_string(nbytes) + " bytes");
    cu_check(rc, "cuMemHostAlloc");
    locked = true;
  } else {
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t align = nbytes >= (size_t{2} << 20) ? (size_t{2} << 20) : page;
    const size_t rounded = (nbytes + align - 1) / align * align;
    if (posix_memalign(&p, align, rounded) != 0 || !p)
      throw std::runtime_error("mlxc_host_alloc: out of host memory for " + std::to_string(nbytes) + " bytes");
    prefault(p, rounded);
  }
  {
    std::lock_guard<std::mutex> lk(host_mutex());
    host_blocks()[reinterpret_cast<uintptr_t>(p)] = HostBlock{nbytes, locked};
  }
  *res = p;
  *pinned = locked;
  MLXC_CATCH(1)
  return 0;
}

int mlxc_host_populate(void* ptr, size_t nbytes) {
  MLXC_TRY
  if (!ptr && nbytes) throw std::invalid_argument("mlxc_host_populate: null pointer");
  mlxc::populate_host(ptr, nbytes);
  MLXC_CATCH(1)
  return 0;
}

int mlxc_host_free(void* ptr) {
  MLXC_TRY
  HostBlock b{};
  {
    std::lock_guard<std::mutex> lk(host_mutex());
    auto it = host_blocks().find(reinterpret_cast<uintptr_t>(ptr));
    if (it == host_blocks().end()) throw std::invalid_argument("mlxc_host_free: not a block of mlxc_host_alloc (or freed already)");
    b = it->second;
    host_blocks().erase(it);
  }
  if (b.pinned) {
    cu_check(driver().host_free(ptr), "cuMemFreeHost");
  } else {
    std::free(ptr);
  }
  MLXC_CATCH(1)
  return 0;
}

int mlxc_array_device_index(int* res, const mlx_array arr) {
  MLXC_TRY
  *res = mlxc::buffer_device(mlxc::arr(arr));
  MLXC_CATCH(1)
  return 0;
}

int mlxc_array_read_any(void* dst, size_t nbytes, const mlx_array arr, const mlx_stream stream) {
  MLXC_TRY
  auto a = mlxc::arr(arr);
  if (a.status() == array::Status::unscheduled) mlxc::eval_within({a}, 0, 0);
  a.wait();
  if (!a.flags().row_contiguous) {
    a = mx::contiguous(a, false, mlxc::read_stream(a, mlxc::stream(stream)));
    mlxc::eval_within({a}, 0, 0);
  }
  mlx_array h{&a};
  if (mlxc_array_read(dst, nbytes, h) != 0) return 1;
  MLXC_CATCH(1)
  return 0;
}

}  // extern "C"
