#!/usr/bin/env bash
# Installs MLX's CUDA build (the "cuda" block of packages/sys/mlx-wheel.json) into
# .mlx/<name>-<version>/ in a site-packages layout: mlx/lib/libmlx.so finds the NVIDIA libraries by
# its RPATH ($ORIGIN/../../nvidia/<lib>/lib), so the pinned nvidia-* wheels are unpacked beside it.
# MLX_NVIDIA_DIR=<a site-packages/nvidia folder> (a PyTorch install's, on a machine that has one)
# links that folder instead of downloading. The project's libmlxc, built against mlx-cpu of the same
# version, loads against this libmlx.so (MLX_LIBMLX, which tools/dev sets when MLX_BACKEND=cuda).
#   tools/install-mlx-cuda.sh [--print-lib]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
pin() { node -p "require('./packages/sys/mlx-wheel.json').cuda.$1"; }
NAME=$(pin name)
VERSION=$(pin version)
DEST=".mlx/${NAME}-${VERSION}"
if [[ "${1:-}" == "--print-lib" ]]; then echo "$ROOT/$DEST/mlx/lib/libmlx.so"; exit 0; fi
NV="${MLX_NVIDIA_DIR:-}"
STAMP="$DEST/.installed${NV:+-linked}"
[[ -f $STAMP ]] && exit 0

log() { printf '[install-mlx-cuda] %s\n' "$*" >&2; }
mkdir -p .mlx/wheels
fetch() { # name version -> wheel path
  local n=$1 v=$2 w
  w=$(ls .mlx/wheels/${n//-/_}-${v}-*.whl 2>/dev/null | head -1 || true)
  if [[ -z $w ]]; then
    log "downloading ${n}==${v} from PyPI"
    python3 -m pip download --quiet --no-deps --only-binary=:all: -d .mlx/wheels "${n}==${v}"
    w=$(ls .mlx/wheels/${n//-/_}-${v}-*.whl | head -1)
  fi
  echo "$w"
}
unpack() { python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$1" "$2"; }

rm -rf "$DEST.tmp" && mkdir -p "$DEST.tmp"
unpack "$(fetch "$NAME" "$VERSION")" "$DEST.tmp"
if [[ -n $NV ]]; then
  [[ -d $NV ]] || { log "MLX_NVIDIA_DIR=$NV is not a folder"; exit 1; }
  ln -s "$(cd "$NV" && pwd)" "$DEST.tmp/nvidia"
  log "linked the NVIDIA libraries of $NV"
else
  for pkg in $(node -p "Object.keys(require('./packages/sys/mlx-wheel.json').cuda.nvidia).join(' ')"); do
    unpack "$(fetch "$pkg" "$(node -p "require('./packages/sys/mlx-wheel.json').cuda.nvidia['$pkg']")")" "$DEST.tmp"
  done
fi
rm -rf "$DEST" && mv "$DEST.tmp" "$DEST"
# The symlink (if any) pointed into DEST.tmp's parent-relative path: recreate it after the move.
if [[ -n $NV ]]; then rm -f "$DEST/nvidia" && ln -s "$(cd "$NV" && pwd)" "$DEST/nvidia"; fi
touch "$STAMP"
log "MLX ${VERSION} (CUDA) installed in $DEST"
