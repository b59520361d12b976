#!/usr/bin/env python3
"""Setup rate through AF_XDP (--dev, one thread and two), through a TAP device
and through kernel sockets, in one run, against the same kernel-socket MPA
responder.

Read first: docs/shared-address.md, tests/interop/shared_test.py
(the namespaces). Two namespaces joined by three veth pairs:
  h0 10.97.1.1 <-> p0 10.97.1.2   the shared interface (iwarp-cm --dev h0, and
                                  the kernel's own sockets on the same address)
  br1 (tap0 + h1) <-> p1 10.97.2.2 the TAP path (iwarp-cm --tap tap0 --ip 10.97.2.3/24)
  h2 10.97.3.1 <-> p2 10.97.3.2   two queues each way: iwarp-cm --dev h2 --threads 2
                                  (one thread on h0, which has one queue: on h2 the
                                  peer's frames on queue 1 would find no socket)
The peer namespace runs one responder on port 5000 (python selectors: reads
an MPA request, answers a revision 2 reply, closes when the client does).
Each path opens --count connections, --parallel in flight, each closed once
established; the rate is connections / wall time of the run (iwarp-cm's
own stats line time; the kernel client's monotonic clock).
The responder is python and serves every path, so it bounds all three
figures; they compare the paths, not the CM's own ceiling (iwarp-cm bench).
Needs root. Removes its namespaces whatever happens.

  shared_setup.py --bin build/bin/iwarp-cm [--count 2000] [--parallel 16]
  shared_setup.py --bin build/bin/iwarp-cm --callgrind [--count 600]

--callgrind: instead of rates, the instructions (all threads, valgrind's
callgrind) per connection of the two --dev paths: a run of --count
connections less a run of --count / 6, over the difference in connections,
so that start and exit cancel out. The queue a frame lands on is the veth's
choice, so the hand-offs, and the count, vary a little from run to run.
Valgrind counts each step of a `rep stos` (memset) as an instruction.
"""
import re
import argparse
import json
import os
import subprocess
import sys
import time

RESPONDER = r"""
import selectors, socket, struct, sys
REP = b"MPA ID Rep Frame" + struct.pack(">BBH", 0x10, 2, 4) + struct.pack(">HH", 1, 1)
sel = selectors.DefaultSelector()
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("0.0.0.0", 5000))
ls.listen(4096)
ls.setblocking(False)
sel.register(ls, selectors.EVENT_READ, None)
print("ready", flush=True)
while True:
    for key, _ in sel.select():
        if key.data is None:
            try:
                c, _ = ls.accept()
            except BlockingIOError:
                continue
            c.setblocking(False)
            sel.register(c, selectors.EVENT_READ, [b"", False])
            continue
        c, st = key.fileobj, key.data
        try:
            b = c.recv(4096)
        except (BlockingIOError, ConnectionError):
            b = b"" if not isinstance(sys.exc_info()[1], BlockingIOError) else None
        if b is None:
            continue
        if not b:
            sel.unregister(c)
            c.close()
            continue
        st[0] += b
        if not st[1] and len(st[0]) >= 20 and len(st[0]) >= 20 + struct.unpack(">H", st[0][18:20])[0]:
            c.send(REP)
            st[1] = True
"""

KERNEL_CLIENT = r"""
import json, socket, struct, sys, time, selectors
to, count, par = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
REQ = b"MPA ID Req Frame" + struct.pack(">BBH", 0x10, 2, 4) + struct.pack(">HH", 1, 1)
sel = selectors.DefaultSelector()
started = done = 0
t0 = time.monotonic()
def start():
    global started
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex((to, 5000))
    sel.register(s, selectors.EVENT_WRITE, [b"", False])
    started += 1
while done < count:
    while started < count and started - done < par:
        start()
    for key, ev in sel.select(5):
        s, st = key.fileobj, key.data
        if not st[1]:
            s.send(REQ)
            st[1] = True
            sel.modify(s, selectors.EVENT_READ, st)
            continue
        st[0] += s.recv(4096)
        if len(st[0]) >= 24:
            sel.unregister(s)
            s.close()
            done += 1
print(json.dumps({"seconds": time.monotonic() - t0, "count": count}))
"""


def sh(*argv, ns=None, ok=True):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(argv)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if ok and r.returncode != 0:
        raise RuntimeError("%s: %s%s" % (" ".join(cmd), r.stdout, r.stderr))
    return r


TX_CSUM_OFF = """
import array, fcntl, socket, struct, sys
val = array.array('B', struct.pack('II', 0x17, 0))
ifr = struct.pack('16sP', sys.argv[1].encode(), val.buffer_info()[0])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
fcntl.ioctl(s.fileno(), 0x8946, ifr)
"""


def setup(host, peer):
    for ns in (host, peer):
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "set", "lo", "up", ns=ns)
    for i in (0, 1, 2):
        q = ["numrxqueues", "2", "numtxqueues", "2"] if i == 2 else []
        sh("ip", "link", "add", "h%d" % i, "netns", host, *q, "type", "veth", "peer", "name",
           "p%d" % i, "netns", peer, *q)
        sh("ip", "addr", "add", "10.97.%d.2/24" % (i + 1), "dev", "p%d" % i, ns=peer)
        sh("ip", "link", "set", "p%d" % i, "up", ns=peer)
        sh("python3", "-c", TX_CSUM_OFF, "p%d" % i, ns=peer)
    for i in (0, 2):
        sh("ip", "addr", "add", "10.97.%d.1/24" % (i + 1), "dev", "h%d" % i, ns=host)
        sh("ip", "link", "set", "h%d" % i, "up", ns=host)
    sh("ip", "link", "add", "br1", "type", "bridge", ns=host)
    sh("ip", "tuntap", "add", "dev", "tap0", "mode", "tap", ns=host)
    for dev in ("h1", "tap0"):
        sh("ip", "link", "set", dev, "master", "br1", "up", ns=host)
    sh("ip", "link", "set", "br1", "up", ns=host)


def cm_rate(a, host, path_args, to):
    r = sh(a.bin, "connect", "--to", to, "--count", str(a.count), "--parallel", str(a.parallel),
           "--timeout", "30", "--json", *path_args, ns=host, ok=False)
    lines = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    stats = [l for l in lines if l["event"] == "stats"][-1]
    cmtime = [l for l in lines if l["event"] == "cmtime"][-1]
    if r.returncode != 0 or cmtime["completed"] != a.count:
        raise RuntimeError("iwarp-cm %s: %s" % (" ".join(path_args), r.stderr.strip()))
    # From the first connection's start to the last close (no set-up time).
    return a.count / stats["time"]


def cm_instructions(a, host, path_args, to):
    """Callgrind's instruction total of one connect --count run."""
    r = sh("valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", a.bin, "connect",
           "--to", to, "--count", str(a.count), "--parallel", str(a.parallel), "--timeout", "60",
           "--json", *path_args, ns=host)
    return int(re.findall(r"Collected : (\d+)", r.stderr)[-1])


def per_connection(a, host):
    out = {}
    for name, args, to in (("af_xdp", ["--dev", "h0"], "10.97.1.2:5000"),
                           ("af_xdp_2_threads", ["--dev", "h2", "--threads", "2"],
                            "10.97.3.2:5000")):
        big = cm_instructions(a, host, args, to)
        small_count = max(1, a.count // 6)
        small = cm_instructions(argparse.Namespace(**{**vars(a), "count": small_count}), host,
                                args, to)
        out[name + "_instructions_per_connection"] = (big - small) / (a.count - small_count)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True)
    p.add_argument("--count", type=int, default=2000)
    p.add_argument("--parallel", type=int, default=16)
    p.add_argument("--callgrind", action="store_true")
    a = p.parse_args()
    host, peer = "iwsr-h-%d" % os.getpid(), "iwsr-p-%d" % os.getpid()
    responder = None
    try:
        setup(host, peer)
        responder = subprocess.Popen(["ip", "netns", "exec", peer, "python3", "-c", RESPONDER],
                                     stdout=subprocess.PIPE, text=True)
        assert responder.stdout.readline().strip() == "ready"
        out = {"count": a.count, "parallel": a.parallel}
        if a.callgrind:
            out.update(per_connection(a, host))
            print(json.dumps(out))
            return 0
        out["af_xdp_per_s"] = cm_rate(a, host, ["--dev", "h0"], "10.97.1.2:5000")
        out["af_xdp_2_threads_per_s"] = cm_rate(a, host, ["--dev", "h2", "--threads", "2"],
                                                "10.97.3.2:5000")
        out["tap_per_s"] = cm_rate(a, host, ["--tap", "tap0", "--ip", "10.97.2.3/24"],
                                   "10.97.2.2:5000")
        r = sh("python3", "-c", KERNEL_CLIENT, "10.97.1.2", str(a.count), str(a.parallel),
               ns=host)
        k = json.loads(r.stdout)
        out["kernel_sockets_per_s"] = k["count"] / k["seconds"]
        print(json.dumps(out))
        return 0
    finally:
        if responder:
            responder.kill()
            responder.wait()
        for ns in (host, peer):
            sh("ip", "netns", "del", ns, ok=False)


if __name__ == "__main__":
    sys.exit(main())
