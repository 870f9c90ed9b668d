#!/usr/bin/env bash
# Installs clang-format, one pinned version, from its PyPI wheel into .mlx/clang-format-<version>/
# (project-local, like MLX; never system-wide). The wheel holds a standalone binary,
# clang_format/data/bin/clang-format, that needs no Python to run. A different version formats
# differently, so the lint step (tools/clang-format.sh --check) only ever runs this one.
#   tools/install-clang-format.sh              install (quick when installed)
#   tools/install-clang-format.sh --print-bin  the binary's path
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VERSION=23.1.3
DEST=".mlx/clang-format-${VERSION}"
BIN="$ROOT/$DEST/clang_format/data/bin/clang-format"
if [[ "${1:-}" == "--print-bin" ]]; then echo "$BIN"; exit 0; fi
[[ -x $BIN ]] && exit 0

log() { printf '[install-clang-format] %s\n' "$*" >&2; }
mkdir -p .mlx/wheels
whl=$(ls .mlx/wheels/clang_format-${VERSION}-*.whl 2>/dev/null | head -1 || true)
if [[ -z $whl ]]; then
  log "downloading clang-format==${VERSION} from PyPI"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d .mlx/wheels "clang-format==${VERSION}"
  whl=$(ls .mlx/wheels/clang_format-${VERSION}-*.whl | head -1)
fi
rm -rf "$DEST.tmp" && mkdir -p "$DEST.tmp"
python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$whl" "$DEST.tmp"
chmod +x "$DEST.tmp/clang_format/data/bin/clang-format"   # zipfile does not keep the mode bits
rm -rf "$DEST" && mv "$DEST.tmp" "$DEST"
log "clang-format $("$BIN" --version | sed 's/.*version //') installed in $DEST"
