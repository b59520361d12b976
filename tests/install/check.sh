#!/usr/bin/env bash
# Installs the library into a scratch prefix and builds a consumer against it
# twice: with find_package(iwcm) and with pkg-config. Args: BUILD_DIR.
set -euo pipefail
build=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
mkdir -p "$work/src"
cat > "$work/src/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(consumer CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(iwcm REQUIRED)
add_executable(consumer main.cpp)
target_link_libraries(consumer iwcm::iwcm)
CM
cat > "$work/src/main.cpp" <<'CPP'
#include <iwcm/core.hpp>
int main() {
    iwcm::Core core;
    auto ok = core.add_address(*iwcm::IpAddr::parse("10.1.1.1"));
    auto l = core.listen({{*iwcm::IpAddr::parse("10.1.1.1"), 4791}, 0});
    return ok && l ? 0 : 1;
}
CPP
cmake -S "$work/src" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/consumer"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
g++ "$work/src/main.cpp" $(pkg-config --cflags --libs iwcm) -o "$work/pc-consumer"
"$work/pc-consumer"
echo "install: find_package and pkg-config consumers built and ran"
