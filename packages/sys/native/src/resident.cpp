// Resident host memory: the arrays a session keeps for its whole life (a model's weights), packed
// into a few large, 2 MiB-aligned mappings that the kernel is asked to back with huge pages.
//
// A decode step of a small model reads every weight once: 27 MiB for a 7M-parameter decoder, spread
// over ~7,000 pages of 4 KiB, more than the second-level TLB holds (~3,000 entries on the cores
// measured), so every step walks the page tables for most of them. On 2 MiB pages the same weights
// span 14 entries. MLX's CPU allocator is malloc: each weight lands on its own 4 KiB pages, and
// where transparent huge pages are in "madvise" mode (the usual default) none of it is ever huge;
// most weights are under 2 MiB, so advising each buffer on its own cannot reach them either. Hence
// one arena: weights are copied one after another into chunks of 32 MiB (a larger weight gets a
// mapping of its own), advised MADV_HUGEPAGE before the first write.
//
// An arena array is an ordinary MLX array: its buffer has the CPU allocator's layout (the size in a
// word before the data) and a deleter that returns the bytes to their chunk. A chunk is unmapped
// when its last array goes (the open chunk is reused from its start instead). Freed bytes in the
// middle of a chunk are not reused on their own: weights come and go with their session, together.
//
// Only on Linux, on MLX's CPU build (whose buffers have that layout; checked once at run time), for
// CPU streams; everywhere else mlxc_array_new_resident is mlxc_array_new_data_on.
//
// Huge pages cost at creation: on a virtual machine a fresh 2 MiB page is backed by the host on its
// first touch, ~1.1 ms a MiB against ~0.3 for small pages that the guest reuses (measured on a
// 2-core VM: BERT-base's 440 MB of weights took 1.1-1.8 s to create against 0.7 s). They win
// ~10% of a decode step at every size (a 7M and a 124.6M decoder alike). So they are asked for the
// first 128 MiB of resident memory a process holds, where the step is shortest and the creation
// cost smallest: MLXC_HUGEPAGES=<MiB> sets another budget, 0 none.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include "mlx/allocator.h"
#include "mlx/memory.h"
#include "mlxc/functions.h"
#include "env.h"
#include "heap.h"
#include "mlxc_private.h"

namespace mx = mlx::core;
namespace alloc = mlx::core::allocator;

namespace {

constexpr size_t kHuge = size_t{2} << 20;
constexpr size_t kChunk = size_t{32} << 20;
/** A weight this large gets a mapping of its own (it would leave most of a chunk's tail unused). */
constexpr size_t kOwnMapping = kChunk / 4;
/** The bytes of resident memory advised for huge pages at most (MLXC_HUGEPAGES, in MiB; 128 by default). */
size_t huge_budget() {
  static const size_t bytes = mlxc::env_budget_mib("MLXC_HUGEPAGES", 128);
  return bytes;
}
/** Each array's data starts on a cache line, its size word just before it. */
constexpr size_t kAlign = 64;
/** The page before a weight of its own mapping, which holds its size word. */
const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

struct Chunk {
  char* base = nullptr;
  size_t size = 0;
  size_t used = 0;
  size_t arrays = 0;
  size_t advised = 0;
  bool open = false;
};

/** Never destroyed: arrays are freed from MLX's threads until the process exits. */
struct Arena {
  std::mutex mu;
  Chunk* open = nullptr;
  size_t live_bytes = 0;
  /**
   * The peak of MLX's active memory plus live_bytes before live_bytes last changed. MLX's allocator
   * sees only its own arrays: at each change of live_bytes its peak (plus the old live_bytes) is
   * folded in here and MLX's peak restarted, so that the two peaks add up exactly.
   */
  size_t earlier_peak = 0;
  size_t mapped_bytes = 0;
  size_t advised_bytes = 0;
};

Arena& arena() {
  static Arena* a = new Arena;
  return *a;
}

Chunk* new_chunk(Arena& a, size_t head, size_t size, bool open) {
  const size_t budget = huge_budget();  // first: a bad MLXC_HUGEPAGES throws
  size = (size + kHuge - 1) & ~(kHuge - 1);
  // A weight of its own mapping starts at `head`, its size word in the 4 KiB page before (else a
  // weight of exactly 8 MiB would take a fifth huge page for its size word).
  char* base = mlxc::map_huge_aligned(head, size);
  // MLX's wording for a failed allocation, which callers recognise as one.
  if (!base) throw std::runtime_error("[malloc] Unable to allocate " + std::to_string(head + size) + " bytes.");
  const bool advised = mlxc::advise_huge(base + head, size, a.advised_bytes, budget);
  auto* c = new Chunk;
  c->base = base;
  c->size = head + size;
  c->advised = advised ? size : 0;
  c->open = open;
  a.mapped_bytes += c->size;
  a.advised_bytes += c->advised;
  return c;
}

void unmap(Arena& a, Chunk* c) {
  munmap(c->base, c->size);
  a.mapped_bytes -= c->size;
  // The budget is of what is mapped: a session made after another was released is advised again.
  a.advised_bytes -= c->advised;
  delete c;
}

/** Space for `nbytes` of data (and its size word) in the open chunk or a new one: the chunk and the offset of the size word. */
std::pair<Chunk*, size_t> reserve(Arena& a, size_t nbytes) {
  const size_t need = nbytes + kAlign;
  if (need >= kOwnMapping) return {new_chunk(a, kPage, nbytes, false), kPage - sizeof(size_t)};
  Chunk* c = a.open;
  size_t at = c ? (c->used + kAlign - 1) & ~(kAlign - 1) : 0;
  if (!c || at + need > c->size) {
    Chunk* fresh = new_chunk(a, 0, kChunk, true);  // first: it may throw
    if (c) {
      c->open = false;
      if (c->arrays == 0) unmap(a, c);
    }
    c = a.open = fresh;
    at = 0;
  }
  c->used = at + need;
  return {c, at + kAlign - sizeof(size_t)};
}

/**
 * The peak of MLX's buffers (MLX's allocator's, which its reset sets to 0, not to what is held: as
 * at least what is held), plus the heap's (heap.cpp: where it serves, MLX's allocator holds almost
 * nothing).
 */
size_t mlx_peak() { return std::max(mx::get_peak_memory(), mx::get_active_memory()) + (mlxc::heap::on() ? mlxc::heap::stats().peak : 0); }

/** Restarts MLX's peak and the heap's. */
void reset_mlx_peak() {
  mx::reset_peak_memory();
  if (mlxc::heap::on()) mlxc::heap::reset_peak();
}

/** live_bytes is about to change (a.mu held): MLX's peak so far, with what the arena held, is kept. */
void fold_peak(Arena& a) {
  a.earlier_peak = std::max(a.earlier_peak, mlx_peak() + a.live_bytes);
  reset_mlx_peak();
}

void release(Chunk* c, size_t nbytes) {
  Arena& a = arena();
  std::lock_guard<std::mutex> lk(a.mu);
  fold_peak(a);
  a.live_bytes -= nbytes;
  if (--c->arrays > 0) return;
  if (c->open)
    c->used = 0;
  else
    unmap(a, c);
}

mx::array new_resident(const void* data, mx::Shape sh, mx::Dtype dt, mx::Stream s) {
#ifdef __linux__
  if (s.device.type != mx::Device::cpu || !mlxc::common_layout()) return mlxc::new_data_on(data, std::move(sh), dt, s);
  const size_t nbytes = mlxc::data_bytes(data, sh, dt);
  if (nbytes == 0) return mlxc::new_data_on(data, std::move(sh), dt, s);
  Arena& a = arena();
  Chunk* c;
  size_t at;
  {
    std::lock_guard<std::mutex> lk(a.mu);
    std::tie(c, at) = reserve(a, nbytes);
    c->arrays++;
    fold_peak(a);
    a.live_bytes += nbytes;
  }
  char* word = c->base + at;
  *reinterpret_cast<size_t*>(word) = nbytes;
  char* dst = word + sizeof(size_t);
  mlxc::populate_host(dst, nbytes);
  mlxc::copy_host(dst, data, nbytes);
  alloc::Data d(alloc::Buffer(word), [c, nbytes](alloc::Buffer) { release(c, nbytes); });
  return mx::array(std::move(d), std::move(sh), dt);
#else
  return mlxc::new_data_on(data, std::move(sh), dt, s);
#endif
}

}  // namespace

namespace mlxc {
char* map_huge_aligned(size_t head, size_t size) {
  void* p = mmap(nullptr, head + size + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  auto lo = reinterpret_cast<uintptr_t>(p);
  uintptr_t start = ((lo + head + kHuge - 1) & ~(kHuge - 1)) - head;
  if (start > lo) munmap(p, start - lo);
  uintptr_t tail = start + head + size;
  uintptr_t end = lo + head + size + kHuge;
  if (end > tail) munmap(reinterpret_cast<void*>(tail), end - tail);
  return reinterpret_cast<char*>(start);
}

bool advise_huge(void* p, size_t size, size_t advised, size_t budget) {
#ifdef MADV_HUGEPAGE
  // Before any page of it exists: advice given after the first touch leaves the touched pages small.
  return advised + size <= budget && madvise(p, size, MADV_HUGEPAGE) == 0;
#else
  return false;  // (the arena and the heap are used on Linux only; this keeps other systems building)
#endif
}

size_t resident_live_bytes() {
  Arena& a = arena();
  std::lock_guard<std::mutex> lk(a.mu);
  return a.live_bytes;
}

size_t peak_memory() {
  Arena& a = arena();
  std::lock_guard<std::mutex> lk(a.mu);
  return std::max(a.earlier_peak, mlx_peak() + a.live_bytes);
}

void reset_peak_memory() {
  Arena& a = arena();
  std::lock_guard<std::mutex> lk(a.mu);
  a.earlier_peak = 0;
  reset_mlx_peak();
}

size_t active_memory() { return mx::get_active_memory() + resident_live_bytes() + (heap::on() ? heap::stats().live : 0); }

size_t cache_memory() { return mx::get_cache_memory() + (heap::on() ? heap::stats().free : 0); }

void clear_cache() {
  mx::clear_cache();
  if (heap::on()) heap::clear_cache();
}

size_t set_cache_limit(size_t limit) {
  if (heap::on()) heap::set_cache_limit(limit);
  return mx::set_cache_limit(limit);
}
}  // namespace mlxc

extern "C" {

int mlxc_array_new_resident(mlx_array* res, const void* data, const int* shape, int dim, mlx_dtype dtype, const mlx_stream stream) {
  MLXC_TRY
  if (dim < 0 || (dim > 0 && !shape)) throw std::invalid_argument("mlxc_array_new_resident: bad shape");
  mlxc::set(*res, new_resident(data, mx::Shape(shape, shape + dim), mlxc::dtype(dtype), mlxc::stream(stream)));
  MLXC_CATCH(1)
  return 0;
}

int mlxc_resident_memory(size_t* live, size_t* mapped, size_t* huge) {
  MLXC_TRY
  if (!live || !mapped || !huge) throw std::invalid_argument("mlxc_resident_memory: null result pointer");
  Arena& a = arena();
  std::lock_guard<std::mutex> lk(a.mu);
  *live = a.live_bytes;
  *mapped = a.mapped_bytes;
  *huge = a.advised_bytes;
  MLXC_CATCH(1)
  return 0;
}

}  // extern "C"
