#!/usr/bin/env bash
# Installs the project into a scratch prefix (README.md "Install") and checks
# what a user gets: the iwarp-cm binary runs, its manual page is where man
# finds it, and the example program
# (examples/connect_pair.cpp) builds against the installed package exactly as
# the README shows -- with find_package(iwcm) in a CMakeLists.txt that sets no
# language standard, and with pkg-config -- and runs. Args: BUILD_DIR.
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null

# The command line is installed with the library.
"$work/prefix/bin/iwarp-cm" --help >/dev/null
echo "install: bin/iwarp-cm runs"

# So is its manual page (the build's, made from the help), where man(1) looks
# under the prefix, and man shows it.
page="$work/prefix/share/man/man1/iwarp-cm.1"
[ -f "$page" ] || { echo "install: share/man/man1/iwarp-cm.1 was not installed" >&2; exit 1; }
cmp -s "$page" "$build/man/iwarp-cm.1" ||
  { echo "install: the installed page is not $build/man/iwarp-cm.1" >&2; exit 1; }
found=$(man -M "$work/prefix/share/man" -w iwarp-cm)
[ "$found" = "$page" ] || { echo "install: man finds '$found', not $page" >&2; exit 1; }
MANPAGER=cat MANWIDTH=80 man -M "$work/prefix/share/man" iwarp-cm | grep -q '^ *iwarp-cm demo \[OPTIONS\]$' ||
  { echo "install: man iwarp-cm does not show the page's synopsis" >&2; exit 1; }
echo "install: man iwarp-cm shows share/man/man1/iwarp-cm.1"

# With the RDMA ABI built, its library is installed, and `iwarp-cm run` finds
# it beside itself and preloads it into a program, which runs.
if [ -e "$build/lib/libiwcm_rdma.so" ]; then
  lib=$(find "$work/prefix" -name libiwcm_rdma.so)
  [ -n "$lib" ] || { echo "install: libiwcm_rdma.so was not installed" >&2; exit 1; }
  preload=$(env -u IWCM_LIBRARY -u LD_PRELOAD "$work/prefix/bin/iwarp-cm" run --tap iwcm-t --ip 10.99.0.2/24 \
            -- printenv LD_PRELOAD)
  [ "$preload" = "$lib" ] || { echo "install: run preloads '$preload', not $lib" >&2; exit 1; }
  echo "install: iwarp-cm run preloads $lib"
fi

# A consumer that asks for nothing but the package: the exported target must
# bring C++20 and tl-expected along (g++ 12 defaults to C++17).
mkdir -p "$work/consumer"
cp "$src/examples/connect_pair.cpp" "$work/consumer/main.cpp"
cat > "$work/consumer/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(consumer CXX)
find_package(iwcm REQUIRED)
add_executable(consumer main.cpp)
target_link_libraries(consumer PRIVATE iwcm::iwcm)
CM
cmake -S "$work/consumer" -B "$work/consumer/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer/build" >/dev/null
"$work/consumer/build/consumer" | tail -1 | grep -qx 'ok: both sides connected and closed'
echo "install: find_package(iwcm) consumer built and ran"

export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
# shellcheck disable=SC2046  # pkg-config output is meant to split into flags
g++ "$work/consumer/main.cpp" $(pkg-config --cflags --libs iwcm) -o "$work/pc-consumer"
"$work/pc-consumer" | tail -1 | grep -qx 'ok: both sides connected and closed'
echo "install: pkg-config consumer built and ran"

# The runtime (iwcm::runtime): a consumer that links it and reads its
# configuration from the environment, as a program under `iwarp-cm run` does.
mkdir -p "$work/runtime"
cat > "$work/runtime/main.cpp" <<'CPP'
#include <cstdio>
#include <iwcm/runtime.hpp>
int main() {
    auto c = iwcm::RuntimeConfig::from_env();
    if (c) return 1;  // the environment names no interface here
    std::printf("%s\n", c.error().c_str());
    return 0;
}
CPP
cat > "$work/runtime/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(runtime_consumer CXX)
find_package(iwcm REQUIRED)
add_executable(runtime_consumer main.cpp)
target_link_libraries(runtime_consumer PRIVATE iwcm::runtime)
CM
cmake -S "$work/runtime" -B "$work/runtime/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/runtime/build" >/dev/null
env -u IWCM_TAP -u IWCM_DEV "$work/runtime/build/runtime_consumer" | grep -q '^no interface: set IWCM_TAP'
echo "install: find_package(iwcm) runtime consumer built and ran"
