#!/usr/bin/env bash
# Installs the MLX wheel pinned in packages/sys/mlx-wheel.json into .mlx/<name>-<version>/, keeping
# the wheel's layout (mlx/lib/libmlx.so finds its bundled libraries through its RPATH).
# The wheel bundles the netlib reference BLAS/LAPACK; unless MLX_BLAS=reference, the bundled files
# are replaced by links to Debian's OpenBLAS (installed with apt-get when missing). The originals
# are kept in mlx_cpu.libs/reference/. See packages/sys/README.md for the figures.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# macOS has no mlx-cpu wheel: there the Metal build (the pin's metal block) is the one MLX.
PIN=""
[[ $(uname -s) == Darwin ]] && PIN=".metal"
NAME=$(node -p "require('./packages/sys/mlx-wheel.json')${PIN}.name")
VERSION=$(node -p "require('./packages/sys/mlx-wheel.json')${PIN}.version")
BLAS="${MLX_BLAS:-openblas}"
DEST=".mlx/${NAME}-${VERSION}"
if [[ "${1:-}" == "--print-root" ]]; then echo "$ROOT/$DEST/mlx"; exit 0; fi
STAMP="$DEST/.installed-$BLAS"
[[ -f $STAMP ]] && exit 0

log() { printf '[install-mlx] %s\n' "$*" >&2; }
mkdir -p .mlx/wheels
whl=$(ls .mlx/wheels/${NAME//-/_}-${VERSION}-*.whl 2>/dev/null | head -1 || true)
if [[ -z $whl ]]; then
  log "downloading ${NAME}==${VERSION} from PyPI"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d .mlx/wheels "${NAME}==${VERSION}"
  whl=$(ls .mlx/wheels/${NAME//-/_}-${VERSION}-*.whl | head -1)
fi
rm -rf "$DEST.tmp" && mkdir -p "$DEST.tmp"
python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$whl" "$DEST.tmp"
libs="$DEST.tmp/${NAME//-/_}.libs"
if [[ $BLAS == openblas && -d $libs ]]; then
  OB=/usr/lib/x86_64-linux-gnu/openblas-pthread
  [[ $(uname -m) == aarch64 ]] && OB=/usr/lib/aarch64-linux-gnu/openblas-pthread
  if [[ ! -f $OB/libblas.so.3 ]]; then
    if command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
      log "installing OpenBLAS (libopenblas0-pthread) from Debian"
      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenblas0-pthread >/dev/null
    else
      log "OpenBLAS not found at $OB and cannot apt-get it; keeping the wheel's reference BLAS"
    fi
  fi
  if [[ -f $OB/libblas.so.3 ]]; then
    mkdir -p "$libs/reference"
    for f in "$libs"/libblas-*.so* "$libs"/liblapack-*.so*; do
      [[ -e $f ]] || continue
      base=$(basename "$f"); mv "$f" "$libs/reference/$base"
      case "$base" in libblas*) ln -s "$OB/libblas.so.3" "$f" ;; liblapack*) ln -s "$OB/liblapack.so.3" "$f" ;; esac
    done
    log "linked MLX to OpenBLAS ($OB)"
  fi
fi
rm -rf "$DEST" && mv "$DEST.tmp" "$DEST"
rm -f "$DEST"/.installed-* && touch "$DEST/.installed-$BLAS"
log "MLX ${VERSION} installed in $DEST"
