// The CPU's working memory on huge pages (heap.cpp): MLX's buffers in its CPU allocator's layout,
// served by alloc_guard.cpp's allocator.
#pragma once

#include <cstddef>

namespace mlxc::heap {

/** A buffer of `size` bytes: the address of its size word (the data follows it), or null where no memory could be mapped. */
void* malloc(size_t size);
/** Frees a buffer of malloc; false (nothing done) where `ptr` is not one. */
bool free(void* ptr);
/** Whether alloc_guard.cpp's allocator serves MLX's buffers from the heap. */
bool on();

struct Stats {
  size_t live;     // the live buffers' bytes
  size_t peak;     // the most live since reset_peak
  size_t mapped;   // the chunks' bytes
  size_t free;     // mapped but not in a live buffer (the cache)
  size_t advised;  // the chunks' bytes advised for huge pages
};
Stats stats();
void reset_peak();
/** Unmaps every chunk with nothing live, and gives the free pages of the others back to the system. */
void clear_cache();
/** Sets how many free bytes may stay mapped (idle chunks beyond are unmapped); the old limit. */
size_t set_cache_limit(size_t limit);

}  // namespace mlxc::heap
