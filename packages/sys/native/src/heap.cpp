// The CPU's working memory: MLX's buffers (a run's activations, its results) on huge pages.
//
// MLX's CPU allocator takes each buffer from malloc and keeps freed ones in a cache for reuse, so
// a model's runs read and write the same buffers over and over. malloc's memory is small pages:
// where transparent huge pages are in "madvise" mode (the usual default) none of it is ever huge.
// How those buffers fall on small pages differs from process to process, and on the 2-core machine
// measured some processes ran throughout in a slow mode: ResNet-50 ~52 ms a run against ~38 in about
// one process of ten, a MobileNet-like model 1.06-1.26 ms against 0.50-0.70 in 7 of 24; with
// malloc's huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1, which a library cannot set) none did.
//
// So this heap: chunks of 32 MiB, 2 MiB-aligned, advised MADV_HUGEPAGE before their first write
// (a buffer over 8 MiB gets a chunk of its own, reused for a buffer of about its size once freed); in them, best fit among the free blocks
// (by size, then address), split from the front, and a freed block merged with its free
// neighbours. A buffer has MLX's CPU layout (its size in a word, then the data, here on a 64-byte
// boundary), so alloc_guard.cpp's allocator hands it to MLX like one of its own and takes it back
// in free(). Live buffers are dense, so a model touches about as many huge pages as it holds MiB.
//
// What is mapped but not live is the heap's cache (mlx_get_cache_memory counts it): a chunk left
// with nothing live is unmapped once more than the cache limit (mlx_set_cache_limit) is free and
// one idle chunk of the ordinary size is kept, and mlx_clear_cache unmaps every idle chunk and
// gives back the whole pages of the free blocks in the others.
//
// Huge pages cost at first touch on a virtual machine (~1.1 ms a MiB against ~0.3, resident.cpp),
// and a model's first run, which allocates more than the later ones, touches most of what the heap
// maps: with every chunk advised, ResNet-50's first run took 105-168 ms against ~63, for ~0.5 ms of
// its 36 a run. So the first chunk (32 MiB) a process maps is advised, where a small model's runs
// live whole (MLXC_HEAP_HUGEPAGES=<MiB> another budget, 0 none).
// Linux, MLX's CPU build only (alloc_guard.cpp decides); MLXC_CPU_HEAP=0 leaves MLX's allocator alone.
#include "heap.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "env.h"
#include "mlxc/functions.h"
#include "mlxc_private.h"

namespace mlxc::heap {
namespace {

constexpr size_t kHuge = size_t{2} << 20;
constexpr size_t kChunk = size_t{32} << 20;
/** A buffer this large (with its header) gets a chunk of its own size. */
constexpr size_t kOwnChunk = kChunk / 4;
/** Blocks start on 64 bytes; a buffer's size word is the last word of its block's first 64. */
constexpr size_t kAlign = 64;

/** The bytes of chunks advised for huge pages at most (MLXC_HEAP_HUGEPAGES, in MiB; 32 by default). */
size_t huge_budget() {
  static const size_t bytes = mlxc::env_budget_mib("MLXC_HEAP_HUGEPAGES", 32);
  return bytes;
}

struct Chunk {
  uintptr_t base = 0;
  size_t size = 0;
  bool advised = false;
  /** A chunk of one large buffer (own), and whether that buffer is freed (idle). */
  bool own = false;
  bool idle = false;
};

/** Never destroyed: MLX frees buffers from its threads until the process exits. */
struct Heap {
  std::mutex mu;
  std::map<uintptr_t, Chunk> chunks;                 // by base
  std::map<uintptr_t, size_t> free_at;               // free blocks: start -> extent
  std::set<std::pair<size_t, uintptr_t>> free_size;  // the same, by (extent, start)
  std::set<std::pair<size_t, uintptr_t>> idle_own;   // own chunks whose buffer is freed, by (size, base)
  size_t live = 0;                                   // the live buffers' sizes (as MLX counts them)
  size_t peak = 0;                                   // the most live since reset_peak
  size_t mapped = 0;                                 // the chunks' bytes
  size_t used = 0;                                   // the live blocks' extents
  size_t advised = 0;                                // the advised chunks' bytes
  size_t limit = size_t{32} << 20;                   // what stays mapped but free (MLX's default cache limit)
};

Heap& heap() {
  static Heap* h = new Heap;
  return *h;
}

size_t extent_of(size_t size) { return (kAlign + size + kAlign - 1) & ~(kAlign - 1); }

void add_free(Heap& h, uintptr_t at, size_t n) {
  h.free_at.emplace(at, n);
  h.free_size.emplace(n, at);
}

void remove_free(Heap& h, std::map<uintptr_t, size_t>::iterator it) {
  h.free_size.erase({it->second, it->first});
  h.free_at.erase(it);
}

/**
 * A fresh 2 MiB-aligned chunk of `size` bytes (a multiple of 2 MiB): an ordinary one free
 * throughout, or one for a large buffer (`own`); null where mmap fails.
 */
Chunk* new_chunk(Heap& h, size_t size, bool own) {
  const size_t budget = huge_budget();
  char* p = map_huge_aligned(0, size);
  if (!p) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(p);
  Chunk c{start, size, advise_huge(p, size, h.advised, budget), own, false};
  h.mapped += size;
  if (c.advised) h.advised += size;
  if (!own) add_free(h, start, size);
  return &h.chunks.emplace(start, c).first->second;
}

void unmap(Heap& h, const Chunk& c) {
  const Chunk gone = c;  // c is the node erased below
  if (gone.own)
    h.idle_own.erase({gone.size, gone.base});
  else
    remove_free(h, h.free_at.find(gone.base));
  munmap(reinterpret_cast<void*>(gone.base), gone.size);
  h.mapped -= gone.size;
  if (gone.advised) h.advised -= gone.size;
  h.chunks.erase(gone.base);
}

bool idle(Heap& h, const Chunk& c) {
  if (c.own) return c.idle;
  auto it = h.free_at.find(c.base);
  return it != h.free_at.end() && it->second == c.size;
}

/**
 * Unmaps idle chunks while more than the limit is free: large buffers' chunks first, then
 * ordinary ones, keeping one of those (a loop that frees all it made and makes it again must not
 * map, and fault in, a fresh chunk each time); every idle chunk where `all`.
 */
void trim(Heap& h, bool all) {
  std::vector<uintptr_t> idle_chunks;
  for (auto it = h.idle_own.rbegin(); it != h.idle_own.rend(); ++it) idle_chunks.push_back(it->second);
  bool kept = all;
  for (auto& [base, c] : h.chunks) {
    if (c.own || !idle(h, c)) continue;
    if (!kept)
      kept = true;
    else
      idle_chunks.push_back(base);
  }
  for (uintptr_t base : idle_chunks) {
    if (!all && h.mapped - h.used <= h.limit) break;
    unmap(h, h.chunks.at(base));
  }
}

/** A large buffer's chunk: an idle one at most a quarter larger than needed, or a new one; null where mmap fails. */
Chunk* own_chunk(Heap& h, size_t need) {
  const size_t bytes = (need + kHuge - 1) & ~(kHuge - 1);
  if (bytes < need) return nullptr;
  auto it = h.idle_own.lower_bound({bytes, 0});
  if (it != h.idle_own.end() && it->first <= bytes + bytes / 4) {
    Chunk* c = &h.chunks.at(it->second);
    h.idle_own.erase(it);
    c->idle = false;
    return c;
  }
  return new_chunk(h, bytes, true);
}

}  // namespace

void* malloc(size_t size) {
  Heap& h = heap();
  const size_t need = extent_of(size);
  if (need < size) return nullptr;  // overflow
  std::lock_guard<std::mutex> lk(h.mu);
  uintptr_t at;
  if (need > kOwnChunk) {
    Chunk* c = own_chunk(h, need);
    if (!c) return nullptr;
    at = c->base;
    h.used += c->size;
  } else {
    auto fit = h.free_size.lower_bound({need, 0});
    if (fit == h.free_size.end()) {
      if (!new_chunk(h, kChunk, false)) return nullptr;
      fit = h.free_size.lower_bound({need, 0});
    }
    const size_t n = fit->first;
    at = fit->second;
    remove_free(h, h.free_at.find(at));
    if (n > need) add_free(h, at + need, n - need);
    h.used += need;
  }
  h.live += size;
  h.peak = std::max(h.peak, h.live);
  auto* word = reinterpret_cast<size_t*>(at + kAlign - sizeof(size_t));
  *word = size;
  return word;
}

bool free(void* ptr) {
  Heap& h = heap();
  uintptr_t at = reinterpret_cast<uintptr_t>(ptr) + sizeof(size_t) - kAlign;
  std::lock_guard<std::mutex> lk(h.mu);
  auto it = h.chunks.upper_bound(at);
  if (it == h.chunks.begin()) return false;
  Chunk& c = (--it)->second;
  if (at >= c.base + c.size) return false;
  const size_t size = *static_cast<size_t*>(ptr);
  h.live -= size;
  if (c.own) {
    h.used -= c.size;
    c.idle = true;
    h.idle_own.emplace(c.size, c.base);
    if (h.mapped - h.used > h.limit) trim(h, false);
    return true;
  }
  size_t n = extent_of(size);
  h.used -= n;
  // Merge with the free block before (within the chunk) and the one after.
  if (at > c.base) {
    auto prev = h.free_at.lower_bound(at);
    if (prev != h.free_at.begin()) {
      --prev;
      if (prev->first + prev->second == at) {
        at = prev->first;
        n += prev->second;
        remove_free(h, prev);
      }
    }
  }
  if (at + n < c.base + c.size) {
    auto next = h.free_at.find(at + n);
    if (next != h.free_at.end()) {
      n += next->second;
      remove_free(h, next);
    }
  }
  add_free(h, at, n);
  if (n == c.size && h.mapped - h.used > h.limit) trim(h, false);
  return true;
}

Stats stats() {
  Heap& h = heap();
  std::lock_guard<std::mutex> lk(h.mu);
  return {h.live, h.peak, h.mapped, h.mapped - h.used, h.advised};
}

void reset_peak() {
  Heap& h = heap();
  std::lock_guard<std::mutex> lk(h.mu);
  h.peak = h.live;
}

void clear_cache() {
  Heap& h = heap();
  std::lock_guard<std::mutex> lk(h.mu);
  trim(h, true);
  // What is free in the chunks still in use: their whole pages go back to the system too (they
  // stay mapped, and read as zeros when a later buffer touches them again).
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  for (const auto& [at, n] : h.free_at) {
    const uintptr_t lo = (at + page - 1) & ~(page - 1), hi = (at + n) & ~(page - 1);
    if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
  }
}

size_t set_cache_limit(size_t limit) {
  Heap& h = heap();
  std::lock_guard<std::mutex> lk(h.mu);
  size_t old = h.limit;
  h.limit = limit;
  trim(h, false);
  return old;
}

}  // namespace mlxc::heap

extern "C" int mlxc_heap_memory(size_t* live, size_t* mapped, size_t* free, size_t* huge) {
  MLXC_TRY
  if (!live || !mapped || !free || !huge) throw std::invalid_argument("mlxc_heap_memory: null result pointer");
  mlxc::heap::Stats s{};
  if (mlxc::heap::on()) s = mlxc::heap::stats();
  *live = s.live;
  *mapped = s.mapped;
  *free = s.free;
  *huge = s.advised;
  MLXC_CATCH(1)
  return 0;
}
