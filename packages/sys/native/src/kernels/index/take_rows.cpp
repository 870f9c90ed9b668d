// Rows of a table picked by index, one memcpy a row (see take_rows.h).
#include "kernels/index/take_rows.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <typeinfo>

#include "kernels/common/cpu.h"
#include "kernels/common/dense.h"
#include "kernels/common/fused_primitive.h"
#include "mlx/backend/cpu/encoder.h"

namespace mlxc::cpu {
namespace {

using mx::array;

template <typename I>
int64_t position(const void* p, size_t i, int64_t v) {
  int64_t k = static_cast<int64_t>(static_cast<const I*>(p)[i]);
  if (k < 0) k += v;
  return std::clamp<int64_t>(k, 0, v - 1);
}

class TakeRows : public FusedPrimitive {
 public:
  using FusedPrimitive::FusedPrimitive;
  const char* name() const override { return "TakeRows"; }
  bool is_equivalent(const mx::Primitive& o) const override { return typeid(o) == typeid(*this); }
  array compose(const std::vector<array>& in) const override { return mx::take(in[0], in[1], 0, st()); }
  std::vector<mx::Shape> output_shapes(const std::vector<array>& in) override {
    auto shape = in[1].shape();
    shape.insert(shape.end(), in[0].shape().begin() + 1, in[0].shape().end());
    return {shape};
  }
  // The positions are not differentiable: the table's gradient is the composition's.
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    auto& out = outs[0];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& enc = mx::cpu::get_command_encoder(stream());
    const array& table = in[0];
    const array idx = row_ordered_input(in[1], enc);
    enc.set_input_array(table);
    enc.set_input_array(idx);
    enc.set_output_array(out);
    enc.dispatch([t = array::unsafe_weak_copy(table), x = array::unsafe_weak_copy(idx), out = array::unsafe_weak_copy(out)]() mutable {
      const int64_t v = t.shape(0);
      const size_t n = x.size(), row = v ? t.nbytes() / static_cast<size_t>(v) : 0;
      const auto* src = t.data<char>();
      auto* dst = out.data<char>();
      const bool wide = x.dtype() == mx::int64;  // else int32 (take_rows sends no other type here)
      const void* ip = x.data<void>();
      const auto copy = [&](size_t i0, size_t i1) {
        for (size_t i = i0; i < i1; i++) {
          const int64_t k = wide ? position<int64_t>(ip, i, v) : position<int32_t>(ip, i, v);
          std::memcpy(dst + i * row, src + static_cast<size_t>(k) * row, row);
        }
      };
      // Threads only past ~256 KiB of rows: below that a wake-up costs more than the copy.
      if (n * row < (size_t{1} << 18))
        copy(0, n);
      else
        parallel_for(n, std::max<size_t>(1, (size_t{1} << 16) / std::max<size_t>(row, 1)), copy);
    });
  }
};

}  // namespace

array take_rows(const array& table, const array& indices, mx::Stream s) {
  if (table.ndim() < 1) throw std::invalid_argument("take_rows: the table must have at least one axis");
  const auto it = indices.dtype();
  if (it != mx::int32 && it != mx::int64 && it != mx::uint32 && it != mx::uint64 && it != mx::int16 && it != mx::int8 && it != mx::uint8 &&
      it != mx::uint16)
    throw std::invalid_argument("take_rows: indices must be integers");
  // The table as it is, in row order: an evaluated one (an embedding, a session's constant); a view
  // or a table still to be computed goes to take (copying a whole table for a few rows would not pay).
  const bool native = !kernels_off() && s.device == mx::Device::cpu && table.shape(0) > 0 && (it == mx::int32 || it == mx::int64) &&
                      table.is_available() && row_ordered(table);
  if (!native) return mx::take(table, indices, 0, s);
  auto shape = indices.shape();
  shape.insert(shape.end(), table.shape().begin() + 1, table.shape().end());
  return array(std::move(shape), table.dtype(), std::make_shared<TakeRows>(s), {table, indices});
}

}  // namespace mlxc::cpu
