#!/usr/bin/env bash
# The C++ style of .clang-format over every tracked C++ file (docs/design.md
# "Code style"). `scripts/format.sh` rewrites them; `scripts/format.sh --check`
# (run by ctest as `format`, and so by CI) lists the files that differ and fails.
set -euo pipefail
cd "$(dirname "$0")/.."
tool=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$tool" ]; then
  echo "format: clang-format-14 is missing (scripts/deps.sh installs it)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.c')
if [ "${1:-}" != "--check" ]; then
  "$tool" -i "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! "$tool" "$f" | cmp -s - "$f"; then
    echo "format: $f differs from .clang-format (run scripts/format.sh)"
    bad=1
  fi
done
exit $bad
