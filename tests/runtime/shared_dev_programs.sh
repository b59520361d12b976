#!/usr/bin/env bash
# Two programs on one shared interface at once, on each end of a veth pair:
# Debian's unmodified rping (rdmacm-utils) over libiwcm_rdma.so, in shared-
# address mode through the interface's switch (src/io/shared/switch.hpp). Namespace A
# runs an rping server on port 7174 and an rping client of B's server on 7175;
# namespace B the mirror image. All four must complete their iterations and
# exit 0; each interface's switch must end by itself after its last program.
# Needs root. Args: BUILD_DIR.
set -euo pipefail
build=$(cd "$1" && pwd)
lib=$build/lib/libiwcm_rdma.so
# A sanitizer's runtime that must come before the library (an ASan build).
preload=${IWCM_TEST_PRELOAD:+$IWCM_TEST_PRELOAD:}$lib
sw=$build/bin/iwarp-cm
[ "$(id -u)" -eq 0 ] || { echo "needs root: network namespaces, veth, XDP" >&2; exit 1; }
command -v rping >/dev/null || { echo "rping missing (scripts/deps.sh installs rdmacm-utils)" >&2; exit 1; }
[ -f "$lib" ] || { echo "$lib missing (build the iwcm_rdma target)" >&2; exit 1; }

tag=$$
na=iwcm-sa-$tag nb=iwcm-sb-$tag
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  # The switches end with their last program; a failed run may leave one.
  for ns in "$na" "$nb"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

ip netns add "$na"
ip netns add "$nb"
ip -n "$na" link add va type veth peer name vb netns "$nb"
ip -n "$na" addr add 10.79.0.1/24 dev va
ip -n "$nb" addr add 10.79.0.2/24 dev vb
for x in "$na va" "$nb vb"; do
  set -- $x
  ip -n "$1" link set lo up
  ip -n "$1" link set "$2" up
done

# One program: its output in $work/NAME, its exit status in $work/NAME.rc.
start() {
  local name=$1 ns=$2 dev=$3; shift 3
  ( ip netns exec "$ns" env LD_PRELOAD="$preload" IWCM_DEV="$dev" IWCM_SWITCH="$sw" "$@" \
      >"$work/$name" 2>&1; echo $? >"$work/$name.rc" ) &
  pids+=($!)
}
wait_for() {  # a bounded poll of kernel state
  local what=$1; shift
  for _ in $(seq 100); do "$@" && return 0; sleep 0.1; done
  echo "timed out waiting for $what" >&2
  return 1
}

# A client started before its server listens is refused (the kernel answers
# the SYN of a port not yet steered with a reset) and exits at once: until a
# connection is refused no more, each client is started again, at most 50
# times (a bounded poll of the server's readiness).
client() {
  local name=$1; shift
  ( for _ in $(seq 50); do
      ip netns exec "$@" >"$work/$name" 2>&1 && { echo 0 >"$work/$name.rc"; exit; }
      grep -q 'REJECTED\|ECONNREFUSED\|error 111\|Connection refused' "$work/$name" || break
      sleep 0.1
    done
    echo 1 >"$work/$name.rc" ) &
  pids+=($!)
}
start a-server "$na" va rping -s -a 10.79.0.1 -p 7174 -C 5
start b-server "$nb" vb rping -s -a 10.79.0.2 -p 7175 -C 5
client a-client "$na" env LD_PRELOAD="$preload" IWCM_DEV=va IWCM_SWITCH="$sw" \
  rping -c -a 10.79.0.2 -p 7175 -C 5 -v
client b-client "$nb" env LD_PRELOAD="$preload" IWCM_DEV=vb IWCM_SWITCH="$sw" \
  rping -c -a 10.79.0.1 -p 7174 -C 5 -v

all_done() { for n in a-server b-server a-client b-client; do [ -f "$work/$n.rc" ] || return 1; done; }
wait_for "the four programs" all_done || true
status=0
for n in a-server b-server a-client b-client; do
  rc=$(cat "$work/$n.rc" 2>/dev/null || echo "none")
  echo "$n: exit $rc"
  if [ "$rc" != 0 ]; then status=1; sed 's/^/    /' "$work/$n"; fi
done
for n in a-client b-client; do
  got=$(grep -c '^ping data: rdma-ping-' "$work/$n" || true)
  echo "$n: $got of 5 iterations"
  [ "$got" -eq 5 ] || status=1
done
# Each switch saw two programs come and go, and ended by itself.
switches() { ! pgrep -f "iwarp-cm switch --dev v[ab]" >/dev/null; }
wait_for "the switches to end" switches || status=1
[ $status -eq 0 ] && echo "ok: two programs on each shared interface"
exit $status
