// Allocation failures as exceptions.
//
// MLX 0.32's allocator::malloc is an inline function that wraps whatever the allocator returns,
// null included: on the CPU build a failed std::malloc (an array larger than memory, or any
// array under `ulimit -v`) gave a buffer at address 0, and the kernel that wrote into it killed
// the process with SIGSEGV. This library defines mlx::core::allocator::allocator() itself, the
// way inline_eval.cpp defines the scheduler's functions: libmlx calls it through its PLT, so
// every allocation MLX makes goes through a thin wrapper over MLX's own allocator, which throws
// "[malloc] Unable to allocate N bytes" (MLX's own wording) instead of returning null. The
// evaluating thread allocates (a primitive's eval_cpu), so the exception reaches the entry point
// that evaluates, which reports it as an error like any other.
//
// On Linux the wrapper also hands MLX's buffers out of the library's own heap (heap.cpp: chunks
// of 2 MiB-aligned mappings, best fit, 64-byte-aligned data) instead of MLX's malloc and cache,
// and takes them back in free(); a buffer made before (the layout probe) goes back to MLX's
// allocator. MLXC_CPU_HEAP=0 leaves MLX's allocator alone.
//
// Where the binding does not happen (a libmlx linked with -Bsymbolic, or macOS's two-level
// namespace), and on MLX builds with a GPU (Metal, CUDA: their allocators report failures
// themselves), MLX's own allocator runs unwrapped. MLXC_ALLOC_GUARD=0 turns the wrapper off.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>

#include "env.h"
#include "heap.h"
#include "mlxc_private.h"
#include "mlx/allocator.h"
#include "mlx/memory.h"
#include "mlx/backend/cuda/cuda.h"
#include "mlx/backend/metal/metal.h"

namespace mx = mlx::core;
namespace alloc = mlx::core::allocator;

namespace {

/** What a failed allocation throws: a std::bad_alloc (what callers of new expect) with MLX's message. */
class AllocationFailed : public std::bad_alloc {
 public:
  explicit AllocationFailed(size_t size) : msg_("[malloc] Unable to allocate " + std::to_string(size) + " bytes.") {}
  const char* what() const noexcept override { return msg_.c_str(); }

 private:
  std::string msg_;
};

/** Whether the heap serves MLX's buffers (set once, when allocator() is first made). */
bool heap_serves = false;

class Guarded final : public alloc::Allocator {
 public:
  explicit Guarded(alloc::Allocator& base) : base_(base) {}
  alloc::Buffer malloc(size_t size) override {
    if (heap_serves) {
      void* p = mlxc::heap::malloc(size);
      if (!p) {
        // Memory held for reuse (MLX's cache, the heap's idle chunks) holds address space this
        // allocation may need: give it back and try once more.
        mlxc::clear_cache();
        p = mlxc::heap::malloc(size);
      }
      if (!p) throw AllocationFailed(size);
      return alloc::Buffer(p);
    }
    alloc::Buffer b = base_.malloc(size);
    if (size && !b.ptr() && mx::get_cache_memory() > 0) {
      // The buffers MLX keeps for reuse (its cache, up to its cache limit) hold memory and address
      // space this allocation may need: give them back and try once more.
      mx::clear_cache();
      b = base_.malloc(size);
    }
    if (size && !b.ptr()) throw AllocationFailed(size);
    return b;
  }
  void free(alloc::Buffer buffer) override {
    // A buffer made before the heap served (or by MLX's allocator) goes back there.
    if (heap_serves && buffer.ptr() && mlxc::heap::free(buffer.ptr())) return;
    base_.free(buffer);
  }
  size_t size(alloc::Buffer buffer) const override { return base_.size(buffer); }
  alloc::Buffer make_buffer(void* ptr, size_t size) override { return base_.make_buffer(ptr, size); }
  void release(alloc::Buffer buffer) override { base_.release(buffer); }

 private:
  alloc::Allocator& base_;
};

using AllocatorFn = alloc::Allocator& (*)();

/** libmlx's own allocator(): the definition in the object that also holds mx::eval. */
AllocatorFn original_allocator() {
  auto* fn = reinterpret_cast<AllocatorFn>(mlxc::libmlx_symbol("_ZN3mlx4core9allocator9allocatorEv"));
  // Only MLX's definition will do: ours would call itself.
  return fn == &alloc::allocator ? nullptr : fn;
}

}  // namespace

namespace mlx::core::allocator {

Allocator& allocator() {
  // Never freed: MLX frees buffers from its stream threads until the process exits.
  static Allocator* a = []() -> Allocator* {
    AllocatorFn base = original_allocator();
    if (!base) {
      std::fprintf(stderr, "mlxc: MLX's allocator() was not found; cannot continue\n");
      std::abort();
    }
    if (mlxc::env_off("MLXC_ALLOC_GUARD")) return &base();
    // The GPU backends' own code reaches their allocators directly and reports failures itself;
    // the wrapper is for the CPU build's plain malloc.
    if (mx::metal::is_available() || mx::cu::is_available()) return &base();
#ifdef __linux__
    heap_serves = !mlxc::env_off("MLXC_CPU_HEAP") && mlxc::common_layout();
#endif
    return new Guarded(base());
  }();
  return *a;
}

}  // namespace mlx::core::allocator

namespace mlxc {
bool common_layout() {
  static const bool yes = [] {
    AllocatorFn base = original_allocator();
    if (!base) return false;
    alloc::Allocator& a = base();
    alloc::Buffer b = a.malloc(24);
    if (!b.ptr()) return false;
    bool ok = static_cast<char*>(b.raw_ptr()) == static_cast<char*>(b.ptr()) + sizeof(size_t) && a.size(b) == 24 &&
              *static_cast<size_t*>(b.ptr()) == 24;
    a.free(b);
    return ok;
  }();
  return yes;
}
}  // namespace mlxc

namespace mlxc::heap {
bool on() {
  alloc::allocator();  // decides
  return heap_serves;
}
}  // namespace mlxc::heap
