#!/usr/bin/env python3
"""Interop tests of shared-address mode: iwarp-cm --dev on a veth interface whose
one address the host kernel's TCP stack uses at the same time.

Read first: docs/shared-address.md, src/io/shared/shared_host.hpp,
interop_test.py (Proc, the JSON lines) and mpa_peer.py.
Each case makes two network namespaces joined by a veth pair: the host side
(h0, 10.98.N.1/24: the kernel's address, shared with iwarp-cm) and the peer
side (p0, 10.98.N.2/24: kernel sockets, our MPA peer). Both are removed at the
end whatever happens; traffic never leaves them. Runs as root.

The peer's veth sends with its transmit checksum offloaded (the TCP checksum
is left for "hardware" that a veth does not have); the host kernel accepts
that, an AF_XDP socket gets the bytes as they are. The peer side's transmit
checksumming is therefore turned off (ethtool -K p0 tx off, done here with
the SIOCETHTOOL ioctl); a real NIC hands over complete checksums.

  shared_test.py --bin build/bin/iwarp-cm CASE
"""
import os
import signal
import socket
import subprocess
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import interop_test  # noqa: E402
from interop_test import Failure, check, sh, expect_exit  # noqa: E402
import json_lines  # noqa: E402  (interop_test put tests/cli on the path)

PEER = os.path.join(HERE, "mpa_peer.py")
PORT = 4791
ECHO_PORT = 7007
SERVER_PORT = 5000
EXIT_SETUP = 1
EXIT_SIGTERM = 143

# Run in the peer namespace: transmit checksumming off on p0 (ETHTOOL_STXCSUM).
TX_CSUM_OFF = """
import array, fcntl, socket, struct
val = array.array('B', struct.pack('II', 0x17, 0))
ifr = struct.pack('16sP', b'p0', val.buffer_info()[0])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
fcntl.ioctl(s.fileno(), 0x8946, ifr)
"""

# Run in the host namespace: a kernel echo service on the shared address.
ECHO = """
import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(64)
print('{"event": "echo_listening"}', flush=True)
def serve(c):
    while True:
        b = c.recv(4096)
        if not b:
            break
        c.sendall(b)
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


class SharedNet(interop_test.Namespaces):
    """Two namespaces and the veth pair between them; removed on exit."""

    def __init__(self, case, subnet, queues=1):
        self.queues = queues  # receive and transmit queues of each end of the veth
        tag = "%s-%d" % (case.replace("_", "-")[:12], os.getpid())
        self.host = "iwxh-" + tag
        self.peer = "iwxp-" + tag
        super().__init__([self.host, self.peer])
        self.n = subnet
        self.addr = "10.98.%d.1" % subnet
        self.peer_addr = "10.98.%d.2" % subnet

    def build(self):
        q = ["numrxqueues", str(self.queues), "numtxqueues", str(self.queues)]
        sh("ip", "link", "add", "h0", "netns", self.host, *q, "type", "veth", "peer", "name", "p0",
           "netns", self.peer, *q)
        for ns, dev, addr in ((self.host, "h0", self.addr), (self.peer, "p0", self.peer_addr)):
            sh("ip", "link", "set", "lo", "up", ns=ns)
            sh("ip", "addr", "add", addr + "/24", "dev", dev, ns=ns)
            sh("ip", "link", "set", dev, "up", ns=ns)
        sh("python3", "-c", TX_CSUM_OFF, ns=self.peer)
        self.wait_carrier()

    def wait_carrier(self, timeout=10):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if "LOWER_UP" in sh("ip", "-o", "link", "show", "h0", ns=self.host).stdout:
                return
            time.sleep(0.05)
        raise Failure("h0 has no carrier after %.0f s" % timeout)

    start = interop_test.Namespaces.spawn

    def xdp_attached(self):
        return "prog/xdp" in sh("ip", "link", "show", "h0", ns=self.host).stdout


class Case:
    def __init__(self, args):
        self.bin = args.bin
        self.tmp = args.tmp
        self.schema = json_lines.load_schema()

    def cm(self, net, name, *argv):
        return net.start(name, [self.bin] + list(argv) + ["--dev", "h0", "--json"], net.host,
                         self.schema)

    def peer(self, net, name, *argv):
        return net.start(name, ["python3", PEER] + list(argv), net.peer)

    def echo(self, net):
        p = net.start("echo", ["python3", "-c", ECHO, net.addr, str(ECHO_PORT)], net.host)
        p.wait_for("echo_listening")
        return p


def poll(what, fn, timeout=10):
    """fn() until it is true (bounded polling of kernel state)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if fn():
            return
        time.sleep(0.05)
    raise Failure("%s: not within %.0f s" % (what, timeout))


def wait_count(proc, event, n, timeout=20):
    """Reads proc's lines until it printed `event` n times in all."""
    while len(proc.events(event)) < n:
        proc.wait_for(event, timeout)


def echo_roundtrip(net, text):
    """A kernel client in the peer namespace talks to the host's echo service."""
    code = ("import socket,sys; s=socket.create_connection((sys.argv[1], %d), 5); "
            "s.sendall(sys.argv[2].encode()); print(s.recv(100).decode())" % ECHO_PORT)
    out = sh("python3", "-c", code, net.addr, text, ns=net.peer).stdout.strip()
    check(out == text, "echo through the kernel on the shared address: got %r" % out)


def capture(net, case):
    path = os.path.join(case.tmp, "shared-%d.pcap" % os.getpid())
    p = subprocess.Popen(["ip", "netns", "exec", net.peer, "tcpdump", "-i", "p0", "-n", "-U",
                          "-w", path, "tcp"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # tcpdump says "listening on" once its socket is open.
    line = p.stderr.readline()
    check(b"listening" in line, "tcpdump did not start: %r" % line)
    return p, path


def resets_in(path):
    out = subprocess.run(["tcpdump", "-n", "-r", path, "tcp[tcpflags] & tcp-rst != 0"],
                         capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if l.strip()]


# ---------------------------------------------------------------- cases

def shared_listen(c, name, subnet, mode):
    """One address: the kernel's echo service and iwarp-cm listen --dev serve the
    peer at once; no reset in the capture; the CM's port is the kernel's too."""
    with SharedNet(name, subnet) as net:
        c.echo(net)
        cap, path = capture(net, c)
        try:
            cm = c.cm(net, "cm", "listen", "--port", str(PORT), "--count", "2", "--pdata", "hi",
                      "--xdp-mode", mode)
            ev = cm.wait_for("listening")
            check(ev["local"] == "%s:%d" % (net.addr, PORT), "listening on %s" % ev["local"])
            check(ev["dev"] == "h0" and ev["xdp"] == mode + "/copy", "xdp mode %s" % ev.get("xdp"))
            check(net.xdp_attached(), "no XDP program on h0 while listening")
            # The port is held in the kernel: a local program cannot take it.
            r = sh("python3", "-c", "import socket; socket.socket().bind(('%s', %d))"
                   % (net.addr, PORT), ns=net.host, ok=False)
            check(r.returncode != 0 and "Address already in use" in r.stderr,
                  "the kernel let a socket bind the CM's port: %s" % r.stderr)
            for i in range(2):
                echo_roundtrip(net, "before-%d" % i)
                cl = c.peer(net, "peer%d" % i, "client", "--to", "%s:%d" % (net.addr, PORT),
                            "--pdata", "req%d" % i)
                rep = cl.wait_for("reply")
                check(rep["reject"] is False, "peer %d rejected" % i)
                check(cl.finish() == 0, "peer %d failed" % i)
                echo_roundtrip(net, "after-%d" % i)
            stats = expect_exit(cm, 0)
            check(stats["established"] == 2, "established %s" % stats["established"])
        finally:
            cap.send_signal(signal.SIGINT)
            cap.wait(timeout=10)
        rst = resets_in(path)
        check(not rst, "resets in the capture:\n" + "\n".join(rst))
        check(not net.xdp_attached(), "XDP program left on h0 after a normal exit")
        # The port is free again for the kernel.
        sh("python3", "-c", "import socket; socket.socket().bind(('%s', %d))" % (net.addr, PORT),
           ns=net.host)


def case_shared_listen(c):
    """The program in the veth driver (native mode)."""
    shared_listen(c, "listen", 1, "native")


def case_shared_listen_generic(c):
    """The program in the kernel's generic (skb) hook, as on a driver without XDP."""
    shared_listen(c, "generic", 7, "generic")


def case_shared_listen_threads(c):
    """listen --threads 2 --dev on a veth with 2 queues: an AF_XDP socket per
    receive queue, 8 kernel clients at once, each connection served by the
    thread that owns its 4-tuple; the kernel's echo service on the same
    address keeps working; the program goes at exit."""
    n = 8
    with SharedNet("threads", 12, queues=2) as net:
        c.echo(net)
        cm = c.cm(net, "cm", "listen", "--port", str(PORT), "--count", str(n), "--threads", "2",
                  "--pdata", "threads")
        ev = cm.wait_for("listening")
        check(ev["threads"] == 2 and ev["dev"] == "h0", "listening line: %s" % ev)
        check(net.xdp_attached(), "no XDP program on h0 while listening")
        clis = [c.peer(net, "client%d" % i, "client", "--to", "%s:%d" % (net.addr, PORT),
                       "--pdata", "c%d" % i) for i in range(n)]
        for cli in clis:
            rep = cli.wait_for("reply")
            check(not rep["reject"] and rep["pdata"] == "threads", "reply: %s" % rep)
            check(cli.finish() == 0, "client failed")
        echo_roundtrip(net, "alongside")
        st = expect_exit(cm, 0)
        got = sorted(r["pdata"] for r in cm.events("connect_request"))
        check(got == sorted("c%d" % i for i in range(n)), "requests: %s" % got)
        check(st["established"] == n and st["live_nodes"] == 0 and st["threads"] == 2, "stats: %s" % st)
        check(not net.xdp_attached(), "XDP program left on h0 after a normal exit")
        print("  %d frames handed between threads" % st["handed_off"], flush=True)


def case_shared_connect_threads(c):
    """connect --dev --count 24 --parallel 8 --threads 2 on a veth with 2 queues
    against a kernel-socket MPA server on the peer: each thread opens its half,
    on ports the kernel reserved (from a narrow ephemeral range) whose 4-tuple
    hashes back to the thread (checked from the server's side with the hash
    written again in Python); every one set up and closed; the kernel's echo
    service on the same address keeps working; afterwards every port of the
    range is the kernel's again and the program is gone."""
    n, threads, lo, hi = 24, 2, 40000, 40199
    with SharedNet("cthreads", 13, queues=2) as net:
        sh("sysctl", "-qw", "net.ipv4.ip_local_port_range=%d %d" % (lo, hi), ns=net.host)
        c.echo(net)
        srv = c.peer(net, "server", "server", "--bind", "%s:%d" % (net.peer_addr, SERVER_PORT),
                     "--close", "wait", "--count", str(n))
        srv.wait_for("listening")
        cm = c.cm(net, "cm", "connect", "--to", "%s:%d" % (net.peer_addr, SERVER_PORT),
                  "--no-p2p", "--count", str(n), "--parallel", "8", "--threads", str(threads),
                  "--timeout", "30")
        st = expect_exit(cm, 0, timeout=90)
        check(srv.finish() == 0, "server failed")
        t = cm.events("cmtime")
        check(len(t) == 1 and t[0]["completed"] == n and t[0]["failed"] == 0, "cmtime: %s" % t)
        check(st["established"] == n and st["live_nodes"] == 0 and st["threads"] == threads,
              "stats: %s" % st)
        ports = [int(e["remote"].strip("()").split(",")[1]) for e in srv.events("accepted")]
        check(len(ports) == n and all(lo <= p <= hi for p in ports),
              "ports outside the kernel's range %d-%d: %s" % (lo, hi, ports))
        per = [0] * threads
        for p in ports:
            per[interop_test.shard_of(net.addr, p, net.peer_addr, SERVER_PORT, threads)] += 1
        check(per == [n // threads] * threads, "connections per thread by our hash: %s" % per)
        check(st["thread_established"] == per, "per thread: %s, by hash %s"
              % (st["thread_established"], per))
        check(st["ports_reserved"] >= n, "ports reserved: %s" % st["ports_reserved"])
        echo_roundtrip(net, "alongside")
        check(not net.xdp_attached(), "XDP program left on h0 after a normal exit")
        code = ("import socket\nfor p in range(%d, %d):\n"
                "    socket.socket().bind(('%s', p))" % (lo, hi + 1, net.addr))
        sh("python3", "-c", code, ns=net.host)
        print("  per thread %s, %d of %d frames handed between threads, %d ports reserved"
              % (per, st["handed_off"], st["dev_frames_in"], st["ports_reserved"]), flush=True)


def case_shared_threads_errors(c):
    """More threads than the interface has receive queues: a clear error, for
    listen and connect, and nothing left attached."""
    with SharedNet("terrors", 15, queues=2) as net:
        for argv in (["listen", "--port", str(PORT)],
                     ["connect", "--to", "%s:%d" % (net.peer_addr, SERVER_PORT), "--count", "2"]):
            r = sh(c.bin, *argv, "--threads", "3", "--dev", "h0", ns=net.host, ok=False)
            check(r.returncode == EXIT_SETUP and "socket on h0 queue 2" in r.stderr and
                  "3 threads need 3 receive queues on h0" in r.stderr,
                  "%s: rc %d, %s" % (argv[0], r.returncode, r.stderr))
            check(not net.xdp_attached(), "XDP program left after a refused start")


# A kernel client on the host: COUNT connections held open at once to the
# peer's port; prints the local ports it got.
MANY = """
import json, socket, sys
socks = []
for _ in range(int(sys.argv[3])):
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), 5)
    socks.append(s)
print(json.dumps({"event": "ports", "ports": [s.getsockname()[1] for s in socks]}), flush=True)
"""


def case_shared_connect(c):
    """iwarp-cm connect --dev reaches a peer listener from the shared address;
    its port comes from the kernel's ephemeral range, and a kernel client that
    then takes almost every other port of the range never gets it."""
    with SharedNet("connect", 2) as net:
        # A narrow ephemeral range (per namespace) makes a collision likely
        # were the CM's port not reserved: the kernel client takes 50 of the 51 other ports
        # of its 52. (Not all 51: Linux's connect() tries an even number of the range's
        # ports, from a random start, so of an odd-sized range one port may never be tried;
        # with 51 ports and the CM on one, the client failed in about one run of six.)
        sh("sysctl", "-qw", "net.ipv4.ip_local_port_range=40000 40051", ns=net.host)
        srv = c.peer(net, "server", "server", "--bind", "%s:%d" % (net.peer_addr, SERVER_PORT),
                     "--close", "wait")
        srv.wait_for("listening")
        sink = net.start("sink", ["python3", "-c", ECHO, net.peer_addr, str(ECHO_PORT)],
                         net.peer)
        sink.wait_for("echo_listening")
        cap, path = capture(net, c)
        try:
            cm = c.cm(net, "cm", "connect", "--to", "%s:%d" % (net.peer_addr, SERVER_PORT),
                      "--pdata", "yo", "--hold", "30")
            est = cm.wait_for("established")
            port = int(est["local"].rsplit(":", 1)[1])
            check(40000 <= port <= 40051, "the CM's port %d is not from the kernel's range" % port)
            kc = net.start("kernel", ["python3", "-c", MANY, net.peer_addr, str(ECHO_PORT), "50"],
                           net.host)
            ports = kc.wait_for("ports")["ports"]
            check(len(ports) == 50 and port not in ports,
                  "the kernel gave the CM's port %d to its own connection: %s" % (port, ports))
            kc.kill()
            cm.p.send_signal(signal.SIGTERM)
            expect_exit(cm, EXIT_SIGTERM)
            check(srv.finish() == 0, "peer server failed")
        finally:
            cap.send_signal(signal.SIGINT)
            cap.wait(timeout=10)
        ours = [l for l in resets_in(path) if l.split()[2].startswith(net.addr)]
        check(not ours, "resets from the host in the capture:\n" + "\n".join(ours))
        check(not net.xdp_attached(), "XDP program left on h0 after SIGTERM")


def case_shared_ports_released(c):
    """60 connections one after another take their ports from the kernel's
    ephemeral range, and every port of the range is the kernel's again after.
    (Reuse within one run is not asserted: a closing node keeps its port until
    the peer's FIN, which this serial peer sends when it gets to it.)"""
    with SharedNet("ports", 8) as net:
        sh("sysctl", "-qw", "net.ipv4.ip_local_port_range=40000 40099", ns=net.host)
        # --close wait: the peer never holds a TIME_WAIT of its own for a 4-tuple.
        srv = c.peer(net, "server", "server", "--bind", "%s:%d" % (net.peer_addr, SERVER_PORT),
                     "--close", "wait", "--count", "60")
        srv.wait_for("listening")
        cm = c.cm(net, "cm", "connect", "--to", "%s:%d" % (net.peer_addr, SERVER_PORT),
                  "--count", "60", "--parallel", "1", "--timeout", "20")
        stats = expect_exit(cm, 0, timeout=60)
        check(stats["established"] == 60, "established %s" % stats["established"])
        check(srv.finish() == 0, "peer server failed")
        # Every port of the range is the kernel's again.
        code = ("import socket\nfor p in range(40000, 40100):\n"
                "    socket.socket().bind(('%s', p))" % net.addr)
        sh("python3", "-c", code, ns=net.host)


def case_shared_ipv6(c):
    """IPv6 on the shared interface: the peer connects to listen --dev --ip, and
    connect --dev reaches the peer (the kernel resolves it with ND)."""
    with SharedNet("ipv6", 10) as net:
        sh("ip", "addr", "add", "fd98::1/64", "dev", "h0", "nodad", ns=net.host)
        sh("ip", "addr", "add", "fd98::2/64", "dev", "p0", "nodad", ns=net.peer)
        cm = c.cm(net, "cm", "listen", "--ip", "fd98::1", "--port", str(PORT), "--count", "1")
        check(cm.wait_for("listening")["local"] == "[fd98::1]:%d" % PORT, "listening address")
        cl = c.peer(net, "peer", "client", "--to", "[fd98::1]:%d" % PORT)
        check(cl.wait_for("reply")["reject"] is False, "rejected")
        check(cl.finish() == 0, "peer failed")
        expect_exit(cm, 0)
        srv = c.peer(net, "server", "server", "--bind", "[fd98::2]:%d" % SERVER_PORT)
        srv.wait_for("listening")
        cm = c.cm(net, "cm2", "connect", "--ip", "fd98::1", "--to", "[fd98::2]:%d" % SERVER_PORT)
        check(cm.wait_for("established")["local"].startswith("[fd98::1]:"), "local address")
        expect_exit(cm, 0)
        check(srv.finish() == 0, "peer server failed")


STREAM_BYTES = 10 * 1000 * 1000


def host_counters(net):
    """The host kernel's TCP counters: OutRsts there would be its answer to a
    segment of the CM's that the XDP program let through."""
    return interop_test.tcp_counters(types.SimpleNamespace(ns=net.host))


def stream_end(cm, kernel, n, limit, cm_initiator):
    """Both ends of a byte stream done: each read the other's pattern, the
    initiator closed first (the CM in TIME_WAIT, or in CLOSE_WAIT after the
    kernel's FIN), no reset from the CM."""
    tags = interop_test.mpa_peer
    ours, theirs = ((tags.TAG_INITIATOR, tags.TAG_RESPONDER) if cm_initiator
                    else (tags.TAG_RESPONDER, tags.TAG_INITIATOR))
    line = interop_test.kernel_end(kernel, n, ours, limit)
    st = expect_exit(cm, 0, timeout=60)
    interop_test.check_transfer(cm, n, interop_test.pattern_sha256(theirs, n), line)
    interop_test.check_end(cm, cm_initiator)
    check(st["resets_sent"] == 0 and st["resets_received"] == 0, "CM resets: %s" % st)


def case_shared_stream(c):
    """Byte streams on the shared address: connect --dev sends and receives 10 MB
    against a kernel server on the peer and closes first; then a kernel client
    does the same with listen --dev and closes first. Both directions verified
    by SHA-256 at both ends; no reset from the CM or the host's kernel; the
    kernel's echo service on the same address answers throughout."""
    n, limit = STREAM_BYTES, 120
    with SharedNet("stream", 11) as net:
        c.echo(net)
        before = host_counters(net)
        srv = c.peer(net, "server", "server", "--bind", "%s:%d" % (net.peer_addr, SERVER_PORT),
                     "--p2p", "--close", "wait", "--send-bytes", str(n), "--expect-bytes", str(n),
                     "--timeout", str(limit))
        srv.wait_for("listening")
        cm = c.cm(net, "cm", "connect", "--to", "%s:%d" % (net.peer_addr, SERVER_PORT),
                  "--send-bytes", str(n), "--expect-bytes", str(n), "--data-timeout", str(limit),
                  "--hold", "0")
        stream_end(cm, srv, n, limit, cm_initiator=True)
        echo_roundtrip(net, "between")
        cm = c.cm(net, "cm2", "listen", "--port", str(PORT), "--count", "1", "--send-bytes",
                  str(n), "--expect-bytes", str(n), "--data-timeout", str(limit))
        cm.wait_for("listening")
        cli = c.peer(net, "client", "client", "--to", "%s:%d" % (net.addr, PORT), "--p2p",
                     "--close", "graceful", "--send-bytes", str(n), "--expect-bytes", str(n),
                     "--timeout", str(limit))
        stream_end(cm, cli, n, limit, cm_initiator=False)
        echo_roundtrip(net, "after")
        after = host_counters(net)
        check(after["OutRsts"] == before["OutRsts"],
              "the host's kernel sent %d resets" % (after["OutRsts"] - before["OutRsts"]))


RPING_PEER = os.path.join(HERE, "rping_peer.py")


def case_shared_rping(c):
    """iwarp-cm rping --dev against rping_peer.py on a kernel socket, as client
    and as server, the data verified (-V) both ways."""
    with SharedNet("rping", 9) as net:
        srv = net.start("peer_server", ["python3", RPING_PEER, "server", "--bind",
                                        "%s:%d" % (net.peer_addr, SERVER_PORT), "-C", "5", "-V"],
                        net.peer)
        poll("peer server listening", lambda: ":%d" % SERVER_PORT in
             sh("ss", "-ltn", ns=net.peer).stdout)
        cm = c.cm(net, "cm_client", "rping", "-c", "-a", net.peer_addr, "-p", str(SERVER_PORT),
                  "-C", "5", "-V")
        done = cm.wait_for("rping")
        check(done["verified"] is True and done["iterations"] == 5, "client rping: %s" % done)
        st = expect_exit(cm, 0)
        # No TAP here: the frames are the AF_XDP socket's.
        check("tap_frames_in" not in st and st["dev_frames_in"] > 0 and st["dev_frames_out"] > 0,
              "stats: %s" % st)
        check(srv.finish() == 0, "peer server failed")
        cm = c.cm(net, "cm_server", "rping", "-s", "-p", str(PORT), "-C", "5", "-V")
        cm.wait_for("listening")
        cl = net.start("peer_client", ["python3", RPING_PEER, "client", "--to",
                                       "%s:%d" % (net.addr, PORT), "-C", "5", "-V"], net.peer)
        done = cm.wait_for("rping")
        check(done["verified"] is True and done["iterations"] == 5, "server rping: %s" % done)
        expect_exit(cm, 0)
        check(cl.finish() == 0, "peer client failed")


def down_up(c, name, subnet, down, up, threads=1):
    """A listener with one connection; down() tears the connection down and the
    listener hears address_down; after up() it hears address_up and serves.
    down() returns whether the CM's reset can reach the peer. On N threads
    (a veth with N queues) each thread's listener hears both, and afterwards
    two clients whose 4-tuples hash to each thread are served."""
    with SharedNet(name, subnet, queues=threads) as net:
        more = ["--threads", str(threads)] if threads > 1 else []
        cm = c.cm(net, "cm", "listen", "--port", str(PORT), *more)
        cm.wait_for("listening")
        cl = c.peer(net, "peer", "client", "--to", "%s:%d" % (net.addr, PORT), "--close", "wait")
        cm.wait_for("established")
        reaches = down(net)
        # Threads print in any order: the reset connection's line and the
        # listeners' address_down lines interleave.
        wait_count(cm, "disconnected", 1)
        gone = cm.events("disconnected")[0]
        check(gone["status"] != 0, "the connection was not torn down: %s" % gone)
        wait_count(cm, "address_down", threads)
        for ev in cm.events("address_down"):
            check(ev["local"] == "%s:%d" % (net.addr, PORT), "address_down: %s" % ev)
        if reaches:
            closed = cl.wait_for("closed")
            check(closed["reset_by_peer"], "the peer's connection was not reset: %s" % closed)
        else:
            cl.kill()
        up(net)
        wait_count(cm, "address_up", threads)
        ports = {s: [] for s in range(threads)}
        for p in range(45000, 46000):
            s = interop_test.shard_of(net.peer_addr, p, net.addr, PORT, threads)
            if len(ports[s]) < (1 if threads == 1 else 2):
                ports[s].append(p)
        for s, ps in ports.items():
            for p in ps:
                again = c.peer(net, "peer%d" % p, "client", "--to", "%s:%d" % (net.addr, PORT),
                               "--from-port", str(p))
                check(again.wait_for("reply")["reject"] is False, "rejected after address_up")
                check(again.finish() == 0, "client from port %d failed" % p)
        cm.p.send_signal(signal.SIGTERM)
        st = expect_exit(cm, EXIT_SIGTERM)
        check(len(cm.events("address_down")) == threads and
              len(cm.events("address_up")) == threads, "address events per thread")
        if threads > 1:
            # The first connection's thread has 3, the other 2.
            check(sorted(st["thread_established"]) == [2, 3], "per thread: %s" % st)


# What takes the shared address away and gives it back; each "down" says
# whether the CM's reset can still reach the peer.
def address_del(net):
    sh("ip", "addr", "del", net.addr + "/24", "dev", "h0", ns=net.host)
    return True


def address_add(net):
    sh("ip", "addr", "add", net.addr + "/24", "dev", "h0", ns=net.host)


def link_down(net):
    sh("ip", "link", "set", "h0", "down", ns=net.host)
    return False


def link_up(net):
    sh("ip", "link", "set", "h0", "up", ns=net.host)
    net.wait_carrier()


def case_shared_address_down(c):
    """Removing the shared address resets the CM's connection (the peer gets the
    reset); the listener waits and serves when the address is back."""
    down_up(c, "addr", 3, address_del, address_add)


def case_shared_link_down(c):
    """The link going down resets the CM's connection (its reset cannot cross
    the link) and the listener waits; up again, it serves."""
    down_up(c, "link", 4, link_down, link_up)


def case_shared_threads_address_down(c):
    """On 2 threads: the shared address removed, then added back."""
    down_up(c, "taddr", 14, address_del, address_add, threads=2)


def case_shared_threads_link_down(c):
    """On 2 threads: the link down (the CM's reset cannot cross it), then up."""
    down_up(c, "tlink", 16, link_down, link_up, threads=2)


def case_shared_sigkill(c):
    """A CM killed by SIGKILL leaves its program attached (it passes segments to
    the kernel, which refuses them) and nothing that blocks a fresh start."""
    with SharedNet("kill", 5) as net:
        cm = c.cm(net, "cm", "listen", "--port", str(PORT))
        cm.wait_for("listening")
        cm.p.kill()
        cm.p.wait()
        check(net.xdp_attached(), "the program went with the process (expected it left)")
        # No AF_XDP socket: the program's redirect falls back to the kernel.
        cl = c.peer(net, "refused", "client", "--to", "%s:%d" % (net.addr, PORT))
        err = cl.wait_for("error")
        check("refused" in err["error"], "expected the kernel's refusal: %s" % err)
        cm2 = c.cm(net, "cm2", "listen", "--port", str(PORT), "--count", "1")
        cm2.wait_for("listening")
        ok = c.peer(net, "peer", "client", "--to", "%s:%d" % (net.addr, PORT))
        check(ok.wait_for("reply")["reject"] is False, "rejected after the fresh start")
        check(ok.finish() == 0, "peer failed")
        expect_exit(cm2, 0)
        check(not net.xdp_attached(), "XDP program left on h0 after a normal exit")


def case_shared_errors(c):
    """Clear errors: a port the kernel uses, a second CM on the interface, no root."""
    with SharedNet("errors", 6) as net:
        busy = net.start("busy", ["python3", "-c", ECHO, net.addr, str(PORT + 1)], net.host)
        busy.wait_for("echo_listening")
        r = sh(c.bin, "listen", "--dev", "h0", "--port", str(PORT + 1), ns=net.host, ok=False)
        check(r.returncode == EXIT_SETUP and "in use by the kernel" in r.stderr,
              "port in use: rc %d, %s" % (r.returncode, r.stderr))
        check(not net.xdp_attached(), "XDP program left after a refused start")
        cm = c.cm(net, "cm", "listen", "--port", str(PORT))
        cm.wait_for("listening")
        r = sh(c.bin, "listen", "--dev", "h0", "--port", str(PORT + 2), ns=net.host, ok=False)
        check(r.returncode == EXIT_SETUP and "another iwarp-cm already runs on h0" in r.stderr,
              "second CM: rc %d, %s" % (r.returncode, r.stderr))
        cm.p.send_signal(signal.SIGTERM)
        expect_exit(cm, EXIT_SIGTERM)
        r = sh("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", c.bin, "listen",
               "--dev", "h0", "--port", str(PORT), ns=net.host, ok=False)
        check(r.returncode == EXIT_SETUP and "needs root" in r.stderr,
              "not root: rc %d, %s" % (r.returncode, r.stderr))
        r = sh(c.bin, "listen", "--dev", "h0", "--ip", "10.98.6.9", "--port", str(PORT),
               ns=net.host, ok=False)
        check(r.returncode != 0 and "not an address of h0" in r.stderr,
              "foreign --ip: rc %d, %s" % (r.returncode, r.stderr))


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}

if __name__ == "__main__":
    interop_test.Case = Case  # main() builds this file's Case
    sys.exit(interop_test.main(CASES, __doc__))
