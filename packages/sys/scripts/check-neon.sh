#!/usr/bin/env bash
# Compile-only check of the fused CPU kernels for AArch64 (the NEON build, math_neon.cpp, and the
# files around it) with a cross compiler, on a machine that cannot run them. Needs
# aarch64-linux-gnu-g++ (Debian/Ubuntu: g++-aarch64-linux-gnu) and MLX's headers (tools/dev setup).
#   packages/sys/scripts/check-neon.sh [MLX_INCLUDE_DIR]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../native"
CXX=${CXX_AARCH64:-aarch64-linux-gnu-g++}
command -v "$CXX" >/dev/null || { echo "check-neon: $CXX not found (install g++-aarch64-linux-gnu)" >&2; exit 2; }
INC=${1:-$(ls -d ../../../.mlx/mlx-cpu-*/mlx/include 2>/dev/null | head -1)}
[[ -d $INC ]] || { echo "check-neon: MLX headers not found; pass their folder" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for f in src/kernels/activation/math_neon.cpp src/kernels/activation/math_generic.cpp src/kernels/activation/math_avx2.cpp \
  src/kernels/activation/math_avx512.cpp src/kernels/activation/activation.cpp src/kernels/norm/norm.cpp \
  src/kernels/conv/epilogue.cpp src/kernels/common/thread_pool.cpp; do
  "$CXX" -std=c++20 -O2 -fPIC -Wall -Wno-psabi -Isrc -Iinclude -I"$INC" -c "$f" -o "$out/$(basename "$f").o"
done
# The dispatch must reach the NEON build.
if ! nm -C "$out/math_generic.cpp.o" | grep -q 'mlxc::cpu::neon::softmax_row'; then
  echo "check-neon: math_generic.cpp does not call the NEON build" >&2
  exit 1
fi
echo "check-neon: the CPU kernels compile for aarch64 with $($CXX -dumpfullversion), and dispatch to NEON"
