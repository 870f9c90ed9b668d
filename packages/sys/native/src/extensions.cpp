// Functions this library adds to mlx-c's ABI (see spec/extensions.ts).
#include <cmath>
#include <sstream>
#include <unordered_set>

#include "mlxc_private.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;
using mlxc::array;

namespace {

struct GraphBytes {
  double total = 0;
  double largest = 0;
  std::optional<array> largest_array;
};

/** Bytes of an array from its shape, in double: MLX's size() is a size_t product that can wrap. */
double bytes_of(const array& a) {
  double n = static_cast<double>(a.itemsize());
  for (auto d : a.shape()) n *= static_cast<double>(d);
  return n;
}

/** Walks the arrays the evaluation of `outputs` would compute (each once), summing their bytes. */
GraphBytes graph_bytes(const std::vector<array>& outputs) {
  GraphBytes g;
  std::unordered_set<std::uintptr_t> seen;
  std::vector<array> stack(outputs.begin(), outputs.end());
  while (!stack.empty()) {
    array a = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(a.id()).second) continue;
    // Computed already (or data that was never a computation): nothing new to allocate.
    if (a.status() != array::Status::unscheduled || !a.has_primitive()) continue;
    auto count = [&](const array& x) {
      double b = bytes_of(x);
      g.total += b;
      if (b > g.largest) {
        g.largest = b;
        g.largest_array = x;
      }
    };
    count(a);
    for (const auto& s : a.siblings()) {
      if (seen.insert(s.id()).second) count(s);
    }
    for (const auto& in : a.inputs()) stack.push_back(in);
  }
  return g;
}

std::string describe(const array& a, double bytes) {
  std::ostringstream os;
  os << "an array of shape [";
  for (size_t i = 0; i < a.shape().size(); i++) os << (i ? ", " : "") << a.shape()[i];
  os << "] " << a.dtype() << " (" << std::llround(bytes) << " bytes";
  if (a.has_primitive()) os << ", made by " << a.primitive().name();
  os << ")";
  return os.str();
}

size_t clamp(double v) {
  return v >= 1.8e19 ? static_cast<size_t>(-1) : static_cast<size_t>(v);
}

}  // namespace

extern "C" {

mlx_stream mlxc_stream_new_any_thread(mlx_device dev) {
  MLXC_TRY return mlx_stream{new mx::Stream(mx::new_thread_unsafe_stream(mlxc::device(dev)))};
  MLXC_CATCH(mlx_stream{nullptr})
}

int mlxc_graph_bytes(size_t* total, size_t* largest, const mlx_vector_array outputs) {
  MLXC_TRY
  auto g = graph_bytes(mlxc::vec(outputs));
  *total = clamp(g.total);
  *largest = clamp(g.largest);
  MLXC_CATCH(1)
  return 0;
}

int mlxc_eval_within(const mlx_vector_array outputs, size_t max_array_bytes, size_t max_total_bytes) {
  MLXC_TRY
  const auto& outs = mlxc::vec(outputs);
  if (max_array_bytes || max_total_bytes) {
    auto g = graph_bytes(outs);
    if (max_array_bytes && g.largest > static_cast<double>(max_array_bytes)) {
      throw std::runtime_error("[memory budget] evaluating would allocate " + describe(*g.largest_array, g.largest) +
                               ", over the limit of " + std::to_string(max_array_bytes) + " bytes per tensor");
    }
    if (max_total_bytes && g.total > static_cast<double>(max_total_bytes)) {
      throw std::runtime_error("[memory budget] evaluating would allocate " + std::to_string(std::llround(g.total)) +
                               " bytes in all, over the limit of " + std::to_string(max_total_bytes) + " bytes (the largest is " +
                               describe(*g.largest_array, g.largest) + ")");
    }
  }
  mx::eval(outs);
  MLXC_CATCH(1)
  return 0;
}

}  // extern "C"
