// The base of the project's CPU primitives (activation/, norm/, gemm/, ...): a composition of MLX ops
// that the VJP differentiates, and the rule that they run on the CPU only (the front ends call
// MLX's own ops on other devices).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "mlx/primitives.h"
#include "mlx/transforms.h"

namespace mlxc::cpu {

class FusedPrimitive : public mlx::core::Primitive {
 public:
  using mlx::core::Primitive::Primitive;
  /** The same result from MLX's own ops, on this primitive's stream. */
  virtual mlx::core::array compose(const std::vector<mlx::core::array>& in) const = 0;

  void eval_gpu(const std::vector<mlx::core::array>&, std::vector<mlx::core::array>&) override {
    throw std::runtime_error(std::string(name()) + " is a CPU kernel (the front end composes MLX ops on other devices)");
  }
  std::vector<mlx::core::array> vjp(const std::vector<mlx::core::array>& primals, const std::vector<mlx::core::array>& cotangents,
                                    const std::vector<int>& argnums, const std::vector<mlx::core::array>&) override {
    auto f = [this](const std::vector<mlx::core::array>& in) { return std::vector<mlx::core::array>{compose(in)}; };
    auto grads = mlx::core::vjp(f, primals, cotangents).second;
    std::vector<mlx::core::array> out;
    for (int i : argnums) out.push_back(grads[i]);
    return out;
  }
  /** Elementwise by default: the first input's shape. */
  std::vector<mlx::core::Shape> output_shapes(const std::vector<mlx::core::array>& in) override { return {in[0].shape()}; }
  mlx::core::Stream st() const { return const_cast<FusedPrimitive*>(this)->stream(); }
};

}  // namespace mlxc::cpu
