#!/usr/bin/env bash
# The whole test suite (simulation included) under AddressSanitizer and
# UBSan: configures build-asan with the `asan` preset (IWCM_SANITIZE=ON),
# builds, and runs ctest. Any sanitizer report fails the run
# (-fno-sanitize-recover=all; ASan aborts on the first error).
# Then the tests of code that several threads call (the runtime) under
# ThreadSanitizer, in build-tsan (the `tsan` preset): a data race fails them.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
if [ ! -f build-asan/CMakeCache.txt ]; then
  cmake --preset asan >/dev/null
fi
cmake --build build-asan -j "$JOBS"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir build-asan --output-on-failure -j "$JOBS"

if [ ! -f build-tsan/CMakeCache.txt ]; then
  cmake --preset tsan >/dev/null
fi
cmake --build build-tsan -j "$JOBS" --target runtime_tests
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
ctest --test-dir build-tsan --output-on-failure -j "$JOBS" -R '^Runtime'
# The libibverbs half of the ABI: the application's threads and the progress
# thread meet in its CQs, channels and QPs (needs root, as its tests do).
cmake --build build-tsan -j "$JOBS" --target abi_verbs_tests
ctest --test-dir build-tsan --output-on-failure -j "$JOBS" -R '^abi\.(Verbs|ConnectedVerbs)'
