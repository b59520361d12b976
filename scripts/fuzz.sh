#!/usr/bin/env bash
# Fuzzing: builds the libFuzzer targets of fuzz/ with clang-14 (ASan + UBSan)
# in build-fuzz, replays each target's committed seed corpus (fuzz/corpus/),
# then fuzzes each target for a bounded time and prints executions and
# coverage per target (also written to build-fuzz/fuzz-summary.txt).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]   default: 25 s each, every target
#   scripts/fuzz.sh --corpus                rewrite fuzz/corpus/ (make_corpus)
#
# New inputs found while fuzzing go to build-fuzz/corpus/<target> (not
# committed); a crash leaves its input in build-fuzz/artifacts/ and fails.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${FUZZ_BUILD:-build-fuzz}
CXX_FUZZ=${CXX_FUZZ:-clang++-14}
ALL=(ethernet ipv4 ipv6 tcp frame mpa fpdu ddp core rdma)

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S fuzz -B "$BUILD" -DCMAKE_CXX_COMPILER="$CXX_FUZZ" >/dev/null
fi
cmake --build "$BUILD" -j "$(nproc)" >/dev/null

if [ "${1:-}" = "--corpus" ]; then
  rm -rf fuzz/corpus
  "$BUILD/make_corpus" fuzz/corpus
  exit 0
fi

SECONDS_EACH=${1:-25}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=("${ALL[@]}")
mkdir -p "$BUILD/artifacts"
summary="$BUILD/fuzz-summary.txt"
# One target: replay its corpus, fuzz it, write its summary row to $BUILD/row_$t.
fuzz_one() {
  local t=$1
  local bin="$BUILD/fuzz_$t" seeds="fuzz/corpus/$t" work="$BUILD/corpus/$t" log="$BUILD/fuzz_$t.log"
  mkdir -p "$work"
  rm -f "$BUILD/row_$t"
  # 1. The committed corpus, each input once.
  if ! "$bin" -rss_limit_mb=2048 "$seeds"/* >"$BUILD/replay_$t.log" 2>&1; then
    echo "fuzz: $t fails on its committed corpus:" >&2
    tail -40 "$BUILD/replay_$t.log" >&2
    return 1
  fi
  # 2. Bounded fuzzing from the corpus (and what earlier runs found).
  if ! "$bin" -max_total_time="$SECONDS_EACH" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$t-" "$work" "$seeds" >"$log" 2>&1; then
    echo "fuzz: $t found a failure (input in $BUILD/artifacts/):" >&2
    grep -v -E '^#[0-9]+ +(NEW|REDUCE|pulse)' "$log" | tail -60 >&2
    return 1
  fi
  local execs rate last cov ft corp
  execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
  rate=$(awk '/stat::average_exec_per_sec/ {print $2}' "$log")
  last=$(grep -E ' cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
  cov=$(sed -E 's/.* cov: ([0-9]+) .*/\1/' <<<"$last")
  ft=$(sed -E 's/.* ft: ([0-9]+) .*/\1/' <<<"$last")
  corp=$(sed -E 's/.* corp: ([0-9]+)\/.*/\1/' <<<"$last")
  printf '%-9s %10s %8s %8s %8s %8s\n' "$t" "$execs" "$rate" "$cov" "$ft" "$corp" >"$BUILD/row_$t"
}

# The targets run JOBS at a time (one per CPU): each is one process on one core, and
# they share nothing but the build folder's read-only binaries.
JOBS=${JOBS:-$(nproc)}
printf '%-9s %10s %8s %8s %8s %8s\n' target execs exec/s cov ft corpus | tee "$summary"
failed=0
for ((i = 0; i < ${#TARGETS[@]}; i += JOBS)); do
  pids=()
  for t in "${TARGETS[@]:i:JOBS}"; do
    fuzz_one "$t" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  for t in "${TARGETS[@]:i:JOBS}"; do
    [ -f "$BUILD/row_$t" ] && tee -a "$summary" <"$BUILD/row_$t"
  done
  [ "$failed" -eq 0 ] || exit 1
done
echo "fuzz: every target replayed its corpus and ran ${SECONDS_EACH}s without a failure"
