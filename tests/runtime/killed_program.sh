#!/usr/bin/env bash
# A program killed mid-transfer: Debian's rping client over libiwcm_rdma.so,
# endless (-C 0), on one end of a veth pair in shared-address mode, is killed
# with SIGKILL (nothing of it runs again) or SIGINT (its own handler: rping
# has none, so the default ends it) while iterations flow. Its ports go back to
# the kernel with its sockets (alone on the interface) or through the switch
# (which drops a client whose socket closed), so the server's next segment
# draws the kernel's reset: the server must hear DISCONNECTED and exit within
# 5 s, and no process of the test may be left.
# Needs root. Args: BUILD_DIR.
set -euo pipefail
build=$(cd "$1" && pwd)
lib=$build/lib/libiwcm_rdma.so
sw=$build/bin/iwarp-cm
preload=${IWCM_TEST_PRELOAD:+$IWCM_TEST_PRELOAD:}$lib
[ "$(id -u)" -eq 0 ] || { echo "needs root: network namespaces, veth, XDP" >&2; exit 1; }
command -v rping >/dev/null || { echo "rping missing (scripts/deps.sh installs rdmacm-utils)" >&2; exit 1; }
[ -f "$lib" ] || { echo "$lib missing (build the iwcm_rdma target)" >&2; exit 1; }

tag=$$
na=iwcm-ka-$tag nb=iwcm-kb-$tag
work=$(mktemp -d)
cleanup() {
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
ip -n "$na" addr add 10.79.1.1/24 dev va
ip -n "$nb" addr add 10.79.1.2/24 dev vb
for x in "$na va" "$nb vb"; do
  set -- $x
  ip -n "$1" link set lo up
  ip -n "$1" link set "$2" up
done

wait_for() {  # a bounded poll
  local what=$1 tries=$2; shift 2
  for _ in $(seq "$tries"); do "$@" && return 0; sleep 0.1; done
  echo "timed out waiting for $what" >&2
  return 1
}
iterations() { local n; n=$(grep -c '^ping data: rdma-ping-' "$work/client" 2>/dev/null) || true; echo "${n:-0}"; }
flowing() { [ "$(iterations)" -ge 20 ]; }
ended() { [ -f "$work/server.rc" ]; }
alone() { [ -z "$(ip netns pids "$na")$(ip netns pids "$nb")" ]; }

status=0
for how in KILL INT; do
  for path in alone switch; do
    extra=()
    [ $path = switch ] && extra=(IWCM_SWITCH="$sw")
    rm -f "$work"/*
    ( ip netns exec "$na" env LD_PRELOAD="$preload" IWCM_DEV=va "${extra[@]}" \
        rping -s -a 10.79.1.1 -p 7174 -C 0 >"$work/server" 2>&1; echo $? >"$work/server.rc" ) &
    # The client until the server listens (a refused connect ends it at once).
    for _ in $(seq 50); do
      # A background job of a script starts with SIGINT ignored: give it back.
      ip netns exec "$nb" env --default-signal=INT LD_PRELOAD="$preload" IWCM_DEV=vb \
        "${extra[@]}" rping -c -a 10.79.1.1 -p 7174 -C 0 -v >"$work/client" 2>&1 &
      client=$!
      wait_for "iterations" 20 flowing && break
      kill -9 $client 2>/dev/null || true
      wait $client 2>/dev/null || true
    done
    flowing || { echo "$how/$path: no iterations"; tail -3 "$work/client" "$work/server"; status=1; continue; }
    # `ip netns exec` execs the program: $client is rping itself.
    kill -s $how $client
    before=$(iterations)
    if wait_for "the server to end" 50 ended; then
      echo "$how/$path: client killed after $before iterations; server exit $(cat "$work/server.rc")"
      grep -q 'DISCONNECT EVENT' "$work/server" || { echo "  no DISCONNECTED"; status=1; }
    else
      echo "$how/$path: the server did not end within 5 s"; sed 's/^/    /' "$work/server"; status=1
    fi
    wait_for "every process to end" 50 alone || { ip netns pids "$na"; ip netns pids "$nb"; status=1; }
    wait 2>/dev/null || true
  done
done
[ $status -eq 0 ] && echo "ok: a killed client ends its server's connection"
exit $status
