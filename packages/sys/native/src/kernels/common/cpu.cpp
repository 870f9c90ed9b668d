// The switch that turns the CPU kernels off, and the hand-written entries of spec/kernels/cpu.ts:
// the thread count and what the kernels run on.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/common/cpu.h"
#include "mlxc_private.h"

namespace mlxc::cpu {

const std::string& cpu_kernels_env() {
  static const std::string value = [] {
    const char* e = std::getenv("MLXC_CPU_KERNELS");
    std::string v = e ? e : "";
    if (!v.empty() && v != "off" && v != "generic" && v != "avx2") {
      // A mistyped choice (e.g. 'portable') would otherwise run the widest build without a word.
      std::fprintf(stderr, "mlxc: MLXC_CPU_KERNELS='%s' is not one of off, generic, avx2: ignored (the widest build runs)\n", v.c_str());
      v.clear();
    }
    return v;
  }();
  return value;
}

bool kernels_off() {
  static const bool off = cpu_kernels_env() == "off";
  return off;
}

}  // namespace mlxc::cpu

extern "C" int mlxc_cpu_set_threads(int n) {
  try {
    mlxc::cpu::set_num_threads(n);
  } catch (const std::exception& e) {
    mlxc::raise(e.what());
    return 1;
  }
  return 0;
}

extern "C" int mlxc_cpu_threads(int* res) {
  if (!res) {
    mlxc::raise("mlxc_cpu_threads: res is null");
    return 1;
  }
  *res = mlxc::cpu::num_threads();
  return 0;
}

extern "C" int mlxc_cpu_has_avx2(bool* res) {
  if (!res) {
    mlxc::raise("mlxc_cpu_has_avx2: res is null");
    return 1;
  }
  *res = mlxc::cpu::has_avx2();
  return 0;
}

extern "C" int mlxc_cpu_has_avx512(bool* res) {
  if (!res) {
    mlxc::raise("mlxc_cpu_has_avx512: res is null");
    return 1;
  }
  *res = mlxc::cpu::has_avx512();
  return 0;
}
