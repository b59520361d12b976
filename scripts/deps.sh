#!/usr/bin/env bash
# Installs the Debian 12 packages the build and the tests need, if missing.
# Run as root (the README's quick start does this through make).
set -euo pipefail
packages=(
  build-essential cmake make pkg-config
  libexpected-dev libgtest-dev libgmock-dev googletest libbenchmark-dev libcli11-dev
  libpcap-dev tshark iproute2 nftables python3
  # The RDMA ABI (src/abi): rdma-core's headers; its tests run Debian's own rdmacm-utils and perftest.
  libibverbs-dev librdmacm-dev rdmacm-utils perftest ibverbs-utils
  clang-14 libclang-rt-14-dev llvm-14 clang-format-14
  # Shared-address mode (--dev): the XDP program is built with clang, loaded with libbpf, its
  # AF_XDP socket made with libxdp; tcpdump for its tests' captures, ethtool for the README's veth.
  clang libxdp-dev libbpf-dev xdp-tools tcpdump ethtool
  # nsenter and sysctl for the rtnetlink tests.
  util-linux procps
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "deps: missing packages: ${missing[*]} (run as root, or install them with apt-get)" >&2
  exit 1
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
