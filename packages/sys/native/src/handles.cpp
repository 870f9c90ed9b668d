// This library's additions over mlx-c's handles (spec/extensions/handles.ts): an array's metadata,
// many arrays freed, a closure applied, each in one call instead of several through the FFI; and
// streams that any thread may evaluate.
#include <algorithm>
#include <mutex>
#include <set>

#include "mlxc_private.h"

namespace mx = mlx::core;
using mlxc::array;

namespace {
std::mutex any_thread_mutex;
std::set<std::pair<int, int>>& any_thread_streams() {
  static auto* s = new std::set<std::pair<int, int>>();  // never freed: read until exit
  return *s;
}
}  // namespace

void mlxc::mark_any_thread(const mx::Stream& s) {
  std::lock_guard<std::mutex> lk(any_thread_mutex);
  any_thread_streams().emplace(static_cast<int>(s.device.type), s.index);
}

bool mlxc::is_any_thread(const mx::Stream& s) {
  std::lock_guard<std::mutex> lk(any_thread_mutex);
  return any_thread_streams().count({static_cast<int>(s.device.type), s.index}) > 0;
}

extern "C" {

int mlxc_array_meta(int* meta, const mlx_array arr, size_t meta_len) {
  MLXC_TRY
  if (meta_len < 2) throw std::invalid_argument("mlxc_array_meta: meta_len must be at least 2");
  const auto& a = mlxc::arr(arr);
  meta[0] = static_cast<int>(mlxc::to_c(a.dtype()));
  meta[1] = static_cast<int>(a.ndim());
  const size_t n = std::min(a.ndim(), meta_len - 2);
  for (size_t i = 0; i < n; i++) meta[2 + i] = a.shape()[i];
  MLXC_CATCH(1)
  return 0;
}

int mlxc_array_free_many(const uintptr_t* ctxs, size_t ctxs_num) {
  for (size_t i = 0; i < ctxs_num; i++) delete reinterpret_cast<mx::array*>(ctxs[i]);
  return 0;
}

mlx_stream mlxc_stream_new_any_thread(mlx_device dev) {
  MLXC_TRY
  auto s = mx::new_thread_unsafe_stream(mlxc::device(dev));
  mlxc::mark_any_thread(s);
  return mlx_stream{new mx::Stream(s)};
  MLXC_CATCH(mlx_stream{nullptr})
}

int mlxc_closure_apply_arrays(void* n_out_, void* outs_, void* meta_, size_t cap, size_t meta_stride, const mlx_closure cls,
                              const uintptr_t* ins, size_t n_in) {
  MLXC_TRY
  auto* n_out = static_cast<uint64_t*>(n_out_);
  auto* outs = static_cast<uintptr_t*>(outs_);
  auto* meta = static_cast<int*>(meta_);
  if (meta_stride < 2) throw std::invalid_argument("mlxc_closure_apply_arrays: meta_stride must be at least 2");
  auto res = mlxc::closure(cls)(mlxc::arrays_of(ins, n_in, "mlxc_closure_apply_arrays"));
  *n_out = res.size();
  if (res.size() > cap) return 0;  // the caller asks again with room for n_out
  for (size_t i = 0; i < res.size(); i++) {
    const auto& a = res[i];
    int* m = meta + i * meta_stride;
    m[0] = static_cast<int>(mlxc::to_c(a.dtype()));
    m[1] = static_cast<int>(a.ndim());
    const size_t nd = std::min(a.ndim(), meta_stride - 2);
    for (size_t k = 0; k < nd; k++) m[2 + k] = a.shape()[k];
  }
  for (size_t i = 0; i < res.size(); i++) outs[i] = reinterpret_cast<uintptr_t>(new array(std::move(res[i])));
  MLXC_CATCH(1)
  return 0;
}

}  // extern "C"
