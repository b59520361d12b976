#!/usr/bin/env bash
# Installs the Debian 12 packages that one kind of work needs, if missing:
#
#   scripts/deps.sh demo         `make demo`: build and run the iwarp-cm program and its library
#   scripts/deps.sh bench        `make bench`: the demo's set and Google Benchmark
#   scripts/deps.sh [test]       `make test` and CI: everything every test needs (the default)
#   scripts/deps.sh --list SET   print the set's packages, one a line; install nothing
#
# The table below is the one list: each line names the sets that want a package (comma-
# separated), the package, and why. The demo set is part of the bench and test sets, and has
# none of the tools that only the tests use (tests/deps/deps_test.py checks both).
# Installing needs root (the README's quick start does this through make).
set -euo pipefail

table() {
  cat <<'EOF'
# sets            package             why
demo,bench,test   build-essential     g++ and make: every build compiles with them
demo,bench,test   make                runs the Makefile's quick-start targets
demo,bench,test   cmake               configures every build (CMake 3.25 or newer)
demo,bench,test   libexpected-dev     tl::expected, in the library's public headers
demo,bench,test   libcli11-dev        CLI11, the iwarp-cm command line's parser
demo,bench,test   liburing-dev        liburing: a TAP's reads and writes in batches through io_uring (src/io/tap/tap_ring.hpp)
demo,bench,test   python3             writes the manual page iwarp-cm(1) from the program's help at build time; bench/plot.py and the test drivers
bench,test        libbenchmark-dev    Google Benchmark: the micro-benchmarks (iwcm_bench), which the tests' build configures too
test              pkg-config          finds libxdp and libbpf; the install test's pkg-config consumer
test              libgtest-dev        GoogleTest: the unit, simulation and ABI tests
test              libgmock-dev        GoogleMock, part of GoogleTest's CMake package
test              googletest          the GoogleTest sources that libgtest-dev builds from
test              libpcap-dev         libpcap, the reference reader of the captures --pcap writes (src/io/loop/pcap.hpp); nothing links it
test              tshark              decodes every frame of the interop and rping tests' captures
test              iproute2            ip: the network namespaces, bridges, TAPs and veths of the interop tests
test              nftables            nft: the interop tests' loss and flood rules on the kernel's side
test              groff-base          groff: the manual page test renders iwarp-cm(1) and checks it for warnings
test              man-db              man: the install test looks the installed page up
test              libibverbs-dev      rdma-core's verbs headers: the RDMA ABI library (libiwcm_rdma) and its tests
test              librdmacm-dev       rdma-core's librdmacm headers: the RDMA ABI library and its tests
test              rdmacm-utils        Debian's rping, ucmatose, cmtime and rdma_server, run unmodified through iwarp-cm run
test              perftest            Debian's ib_write_bw, ib_read_bw, ib_send_bw and their latency twins, run the same way
test              ibverbs-utils       rdma-core's verbs tools (ibv_devinfo) beside the programs above; no test runs them
test              clang-14            builds the fuzz targets (scripts/fuzz.sh, libFuzzer)
test              libclang-rt-14-dev  libFuzzer and the sanitizers' runtimes for clang-14
test              llvm-14             LLVM's tools for clang-14 (llvm-symbolizer-14 for the fuzzers' reports)
test              clang-format-14     the format test (scripts/format.sh --check)
test              clang               compiles the XDP program of shared-address mode (--dev) for the BPF target
test              libxdp-dev          libxdp: the AF_XDP socket of shared-address mode
test              libbpf-dev          libbpf: the XDP program's maps
test              xdp-tools           xdp-loader and xdpdump, to look at a shared test's XDP program by hand; no test runs them
test              tcpdump             the shared tests' captures on the kernel's side of the veth
test              ethtool             turns checksum offload off on the tests' veths
test              util-linux          nsenter and unshare for the rtnetlink tests and the isolated usage tests
test              procps              sysctl for the rtnetlink and interop tests
EOF
}

# The packages of set $1, in the table's order.
packages_of() {
  table | awk -v set="$1" '!/^#/ && NF >= 3 {
    n = split($1, sets, ",")
    for (i = 1; i <= n; i++) if (sets[i] == set) { print $2; break }
  }'
}

list=0
if [ "${1:-}" = "--list" ]; then
  list=1
  shift
fi
set_name=${1:-test}
case "$set_name" in
  demo | bench | test) ;;
  *)
    echo "deps: unknown set '$set_name' (demo, bench, test)" >&2
    exit 2
    ;;
esac
mapfile -t packages < <(packages_of "$set_name")
if [ "$list" -eq 1 ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "deps: missing packages ($set_name): ${missing[*]} (run as root, or install them with apt-get)" >&2
  exit 1
fi
echo "deps: installing ($set_name) ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
