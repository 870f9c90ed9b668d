#!/usr/bin/env bash
# clang-format over the native sources that people write, packages/sys/native/src (the glue in
# native/generated and the headers in native/include/mlxc are the generator's output, left as it
# writes them), with the pinned binary of tools/install-clang-format.sh and the repository's
# .clang-format.
#   tools/clang-format.sh          formats them in place
#   tools/clang-format.sh --check  changes nothing; exits 1 naming every file (and line) that is not
#                                  formatted (the lint step of tools/dev test)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash tools/install-clang-format.sh
CF="$(bash tools/install-clang-format.sh --print-bin)"
mapfile -t files < <(find packages/sys/native/src -type f \( -name '*.cpp' -o -name '*.h' \) | sort)
if [[ "${1:-}" == "--check" ]]; then
  if ! "$CF" --dry-run --Werror "${files[@]}"; then
    echo "native sources are not formatted: run tools/clang-format.sh (clang-format $("$CF" --version | sed 's/.*version //'))" >&2
    exit 1
  fi
else
  "$CF" -i "${files[@]}"
fi
