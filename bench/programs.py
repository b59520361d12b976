#!/usr/bin/env python3
"""The RDMA programs users run, over iwarp-cm, beside the kernel's TCP in the same run.

Debian's own cmtime (rdmacm-utils), ib_write_bw and ib_write_lat (perftest),
unmodified, with libiwcm_rdma.so preloaded: on a veth pair between two
network namespaces in shared-address mode (AF_XDP; alone on the interface,
and through the interface's switch), and on two TAP devices on a bridge.
Beside them, on the same veth pair in the same run, the Linux kernel's TCP
doing the same work (bench/programs/tcp_peer.cpp): a connect and a
disconnect per connection, a stream of messages of the same size, a
ping-pong of the same size. Ratios are ours over the kernel's (higher is
better for bandwidth; for times, the kernel's over ours).

Needs root. Usage: programs.py BUILD_DIR [--json FILE] [--conns N] [--iters N]
Benchmark, not a test: it prints figures and fails only when a program does.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "programs"))
from netns import PROBE  # noqa: E402  (the TCP handshake probe the program tests wait with)

NS_A, NS_B, NS_T = "iwcm-pa", "iwcm-pb", "iwcm-pt"
VETH = ("10.80.0.1", "10.80.0.2")
TAPS = ("10.81.0.1", "10.81.0.2")
TAP_PROBE = "10.81.0.254"  # the kernel's address on the bridge, for the probe only
CM_PORT, PERF_PORT = 7471, 18515  # cmtime's and perftest's defaults
# The kernel's own figures on a port of their own: the TIME_WAIT sockets they leave would
# hold perftest's port, which shared-address mode reserves in the kernel too.
KERNEL_PORT = 18600
TRIES = 4


def sh(*cmd):
    subprocess.run(cmd, check=True)


def setup():
    teardown()
    sh("ip", "netns", "add", NS_A)
    sh("ip", "netns", "add", NS_B)
    sh("ip", "-n", NS_A, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", NS_B)
    for ns, dev, ip in ((NS_A, "va", VETH[0]), (NS_B, "vb", VETH[1])):
        sh("ip", "-n", ns, "addr", "add", ip + "/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "link", "set", dev, "up")
    sh("ip", "netns", "add", NS_T)
    sh("ip", "-n", NS_T, "link", "set", "lo", "up")
    sh("ip", "-n", NS_T, "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", NS_T, "addr", "add", TAP_PROBE + "/24", "dev", "br0")
    sh("ip", "-n", NS_T, "link", "set", "br0", "up")
    for tap in ("ta", "tb"):
        sh("ip", "-n", NS_T, "tuntap", "add", "dev", tap, "mode", "tap")
        sh("ip", "-n", NS_T, "link", "set", tap, "master", "br0")
        sh("ip", "-n", NS_T, "link", "set", tap, "up")


def teardown():
    for ns in (NS_A, NS_B, NS_T):
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        for pid in pids.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)


class Mode:
    """Where a pair of programs runs: (namespace, environment) of server and client."""

    def __init__(self, name, server, client, addr):
        self.name, self.server, self.client, self.addr = name, server, client, addr


def modes(build):
    lib = os.path.join(build, "lib", "libiwcm_rdma.so")
    switch = os.path.join(build, "bin", "iwarp-cm")
    pre = {"LD_PRELOAD": lib}
    return [
        Mode("xdp", (NS_A, dict(pre, IWCM_DEV="va")), (NS_B, dict(pre, IWCM_DEV="vb")), VETH[0]),
        Mode("xdp_switch",
             (NS_A, dict(pre, IWCM_DEV="va", IWCM_SWITCH=switch)),
             (NS_B, dict(pre, IWCM_DEV="vb", IWCM_SWITCH=switch)), VETH[0]),
        Mode("tap",
             (NS_T, dict(pre, IWCM_TAP="ta", IWCM_IP=TAPS[0] + "/24")),
             (NS_T, dict(pre, IWCM_TAP="tb", IWCM_IP=TAPS[1] + "/24")), TAPS[0]),
    ]


def spawn(ns, env, argv, out):
    full = dict(os.environ, **env)
    return subprocess.Popen(["ip", "netns", "exec", ns] + argv, env=full, stdout=out,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def kill(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def wait_listening(mode, port, server, sout, timeout=20):
    """Until a TCP handshake with the server's port completes from the client's
    namespace (the probe resets it before any MPA request, so the program never
    hears of it): a bounded poll of the server's state."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if server.poll() is not None:
            sout.seek(0)
            raise RuntimeError(f"{mode.name}: the server exited {server.returncode} before it "
                               f"listened:\n{sout.read()}")
        r = subprocess.run(["ip", "netns", "exec", mode.client[0], sys.executable, "-c", PROBE,
                            mode.addr, str(port), "0.5"], capture_output=True, text=True)
        if r.stdout.strip() == "listening":
            return
        time.sleep(0.05)
    raise RuntimeError(f"{mode.name}: nothing listened on port {port} within {timeout} s")


def pair(mode, port, server_argv, client_argv, timeout=120, server_exits=True):
    """Runs the server, once it listens the client; returns the client's output.
    The client must exit 0, and the server too where it ends by itself (cmtime's
    serves until killed). perftest -R connects twice; over --dev a second connect
    that comes before the server listens again may meet the kernel's reset
    (REJECTED -111): then both run again, at most TRIES times."""
    for attempt in range(1, TRIES + 1):
        with tempfile.TemporaryDirectory() as work, open(os.path.join(work, "server"), "w+") as sout:
            server = spawn(mode.server[0], mode.server[1], server_argv, sout)
            try:
                deadline = time.monotonic() + timeout
                wait_listening(mode, port, server, sout)
                client = subprocess.run(
                    ["ip", "netns", "exec", mode.client[0]] + client_argv,
                    env=dict(os.environ, **mode.client[1]), capture_output=True, text=True,
                    timeout=max(1, deadline - time.monotonic()))
                out = client.stdout + client.stderr
                if client.returncode != 0:
                    if "error: -111" in out and attempt < TRIES:
                        print(f"  {mode.name}: {client_argv[0]} refused on its second connect; "
                              "once more", flush=True)
                        continue
                    raise RuntimeError(f"{mode.name}: {' '.join(client_argv)} exited "
                                       f"{client.returncode}:\n{out}")
                if server_exits:
                    server.wait(timeout=max(1, deadline - time.monotonic()))
                    if server.returncode != 0:
                        sout.seek(0)
                        raise RuntimeError(f"{mode.name}: {server_argv[0]} server exited "
                                           f"{server.returncode}:\n{sout.read()}")
                return out
            except subprocess.TimeoutExpired:
                sout.seek(0)
                raise RuntimeError(f"{mode.name}: timed out; server said:\n{sout.read()}")
            finally:
                kill(server)
    raise AssertionError("unreachable")


def cmtime(mode, conns):
    out = pair(mode, CM_PORT, ["cmtime", "-b", mode.addr, "-c", str(conns)],
               ["cmtime", "-s", mode.addr, "-c", str(conns)], server_exits=False)
    steps = {}
    for line in out.splitlines():
        m = re.match(r"\s*(connect|disconnect)\s*:\s*(.*)", line)
        if m:
            steps[m.group(1)] = float(m.group(2).split()[-1])  # us/conn: total / conns
    return {"connect_us": steps["connect"], "disconnect_us": steps["disconnect"]}


def perftest(mode, prog, size, iters):
    args = [prog, "-R", "-F", "-s", str(size), "-n", str(iters)]
    out = pair(mode, PERF_PORT, args, args + [mode.addr])
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 4 and cols[0] == str(size) and cols[1] == str(iters):
            if prog.endswith("_bw"):
                # perftest's MB/sec is 2^20 bytes a second; tcp_peer's 10^6.
                return {"mb_per_s": float(cols[3]) * 1.048576}
            return {"p50_us": float(cols[4]), "p99_us": float(cols[7])}
    raise RuntimeError(f"{mode.name}: no result row in {prog}'s output:\n{out}")


def kernel(peer, conns, iters):
    server = spawn(NS_A, {}, [peer, "serve", str(KERNEL_PORT)], subprocess.DEVNULL)
    try:
        def run(*args):
            for _ in range(100):
                r = subprocess.run(["ip", "netns", "exec", NS_B, peer] + list(args),
                                   capture_output=True, text=True)
                if r.returncode == 0:
                    return dict((k, float(v)) for k, v in
                                (kv.split("=") for kv in r.stdout.split()))
                time.sleep(0.1)  # the server is not listening yet: a bounded poll
            raise RuntimeError(f"tcp_peer {' '.join(args)}: {r.stderr}")
        return {
            "cmtime": run("connect", VETH[0], str(KERNEL_PORT), str(conns)),
            "write_bw": run("stream", VETH[0], str(KERNEL_PORT), "65536", str(iters)),
            "write_lat": run("pingpong", VETH[0], str(KERNEL_PORT), "2", str(iters)),
        }
    finally:
        kill(server)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--json")
    ap.add_argument("--conns", type=int, default=200)
    ap.add_argument("--iters", type=int, default=5000)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    peer = os.path.join(build, "bin", "iwcm_tcp_peer")
    if os.geteuid() != 0:
        sys.exit("programs.py: needs root (network namespaces, TAPs, XDP)")
    setup()
    try:
        result = {"kernel": kernel(peer, a.conns, a.iters)}
        # The kernel's TCP checksum left to the "hardware" would reach an AF_XDP socket
        # unfilled: the probe's SYN (wait_listening) needs it done in software. After the
        # kernel's own figures, which keep the veth's offloads.
        for ns, dev in ((NS_A, "va"), (NS_B, "vb")):
            sh("ip", "netns", "exec", ns, "ethtool", "-K", dev, "tx", "off")
        for mode in modes(build):
            result[mode.name] = {
                "cmtime": cmtime(mode, a.conns),
                "write_bw": perftest(mode, "ib_write_bw", 65536, a.iters),
                "write_lat": perftest(mode, "ib_write_lat", 2, a.iters),
            }
    finally:
        teardown()
    k = result["kernel"]
    print(f"{'':12}{'connect us':>12}{'disconnect us':>15}{'write 64K MB/s':>16}"
          f"{'lat 2B p50 us':>15}{'p99 us':>9}")
    for name in ["kernel"] + [m.name for m in modes(build)]:
        r = result[name]
        print(f"{name:12}{r['cmtime']['connect_us']:12.1f}{r['cmtime']['disconnect_us']:15.1f}"
              f"{r['write_bw']['mb_per_s']:16.1f}{r['write_lat']['p50_us']:15.2f}"
              f"{r['write_lat']['p99_us']:9.2f}")
    for name in [m.name for m in modes(build)]:
        r = result[name]
        ratios = {
            "connect": k["cmtime"]["connect_us"] / r["cmtime"]["connect_us"],
            "disconnect": k["cmtime"]["disconnect_us"] / r["cmtime"]["disconnect_us"],
            "write_bw": r["write_bw"]["mb_per_s"] / k["write_bw"]["mb_per_s"],
            "write_lat_p50": k["write_lat"]["p50_us"] / r["write_lat"]["p50_us"],
        }
        r["ratio_to_kernel"] = ratios
        print(f"{name} / kernel: " + ", ".join(f"{n} {v:.2f}x" for n, v in ratios.items()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
