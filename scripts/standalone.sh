#!/usr/bin/env bash
# The repository stands alone: no tracked file may refer to a folder beside the
# clone (the parent's shared/ folder of the workplace it was started in) or to
# an absolute path of a build machine. Run by .ci/run before the tests and by
# ctest (`standalone`). Prints each offending line and exits 1 if any.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "standalone: not a git checkout, nothing to check" >&2
  exit 0
fi
# Built from pieces so that this file does not match itself.
dots='\.\.'
beside="${dots}/shared"
machine='(^|[^A-Za-z0-9_.~-])/(work|home|root|Users|srv|mnt|media)/'
hits=$(git grep -nIE -e "$beside" -e "$machine" -- . ':!fuzz/corpus' || true)
if [ -n "$hits" ]; then
  echo "standalone: tracked files refer to paths outside the repository:" >&2
  echo "$hits" >&2
  exit 1
fi
echo "standalone: no tracked file refers outside the repository"
