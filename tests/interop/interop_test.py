#!/usr/bin/env python3
"""Interop tests: iwarp-cm on a TAP device against the Linux kernel's TCP stack.

Read first: docs/kernel-tcp.md (the same setup by hand) and mpa_peer.py.
Each case builds its own network namespace: a bridge br0 holding the kernel's
addresses (10.99.N.1/24, fd99:0:0:N::1/64), the CM's TAP tap0 on it, and
removes the namespace at the end whatever happens (traffic never leaves it).
Runs as root; a missing kernel feature fails the case loudly.

  interop_test.py --bin build/bin/iwarp-cm CASE      (CASE: see CASES below)
"""
import argparse
import hashlib
import json
import os
import pty
import queue
import re
import select
import signal
import subprocess
import sys
import threading
import time
import tty

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "cli"))
import json_lines  # noqa: E402  (docs/json.md: the schema of iwarp-cm's JSON lines)
import mpa_peer  # noqa: E402  (the byte pattern, as the kernel peer makes it)

PEER = os.path.join(HERE, "mpa_peer.py")
PORT = 4791


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def sh(*argv, ns=None, ok=True):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(argv)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if ok and r.returncode != 0:
        raise Failure("command failed: %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    return r


class Proc:
    """A process in the namespace whose stdout lines are read by a thread.
    With a schema, every line must be valid against it (iwarp-cm's lines)."""

    def __init__(self, name, argv, ns, schema=None):
        self.name = name
        self.schema = schema
        self.lines = []
        self.q = queue.Queue()
        self.p = subprocess.Popen(["ip", "netns", "exec", ns] + argv, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._pump, daemon=True).start()
        print("  start %s: %s" % (name, " ".join(argv)), flush=True)

    def _pump(self):
        for line in self.p.stdout:
            print("    %s| %s" % (self.name, line.rstrip()), flush=True)
            self.q.put(line)
        self.q.put(None)

    def wait_for(self, event, timeout=20):
        """The first JSON line whose event is `event` (earlier ones are kept)."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise Failure("%s: no '%s' within %.0f s" % (self.name, event, timeout))
            try:
                line = self.q.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                # What it said on the way out is the reason.
                try:
                    err = self.p.stderr.read() if self.p.wait(timeout=5) is not None else ""
                except subprocess.TimeoutExpired:
                    err = ""
                raise Failure("%s: exited before '%s'%s" %
                              (self.name, event, ("; stderr: " + err.strip()) if err.strip() else ""))
            obj = self._parse(line)
            self.lines.append(obj)
            if obj.get("event") == event:
                return obj

    def finish(self, timeout=30):
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            raise Failure("%s: did not exit within %.0f s" % (self.name, timeout))
        while True:
            line = self.q.get(timeout=5)
            if line is None:
                break
            self.lines.append(self._parse(line))
        err = self.p.stderr.read()
        if err.strip():
            print("    %s stderr| %s" % (self.name, err.strip()), flush=True)
        self.stderr = err
        return self.p.returncode

    def _parse(self, line):
        if self.schema is not None:
            errs = json_lines.check_line(line, self.schema)
            check(not errs, "%s: a line outside docs/json.md: %s" % (self.name, "; ".join(errs)))
        return json.loads(line)

    def events(self, name):
        return [e for e in self.lines if e.get("event") == name]

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


class Namespaces:
    """Network namespaces a case makes: build() sets them up, and on exit (also
    when build() or the case fails) the processes started in them are killed,
    remove_devices() runs and the namespaces are deleted."""

    def __init__(self, names):
        self.names = list(names)
        self.procs = []

    def build(self):
        pass

    def remove_devices(self):
        pass

    def __enter__(self):
        try:
            for ns in self.names:
                sh("ip", "netns", "add", ns)
            self.build()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
        self.remove_devices()
        for ns in self.names:
            sh("ip", "netns", "del", ns, ok=False)
        left = sh("ip", "netns", "list").stdout.split()
        check(not set(self.names) & set(left), "namespaces not removed: %s" % self.names)

    def spawn(self, name, argv, ns, schema=None):
        p = Proc(name, argv, ns, schema)
        self.procs.append(p)
        return p


class Net(Namespaces):
    """The namespace, bridge and TAP of one case; removed on exit."""

    def __init__(self, case, subnet, taps=("tap0",), multi_queue=False):
        self.ns = "iwcm-%s-%d" % (case.replace("_", "-")[:20], os.getpid())
        super().__init__([self.ns])
        self.n = subnet
        self.taps = taps
        self.multi_queue = multi_queue  # TAPs that `listen --threads` can open a queue of per thread
        self.kernel4 = "10.99.%d.1" % subnet
        self.kernel6 = "fd99:0:0:%d::1" % subnet

    def build(self):
        ns = self.ns
        sh("ip", "link", "set", "lo", "up", ns=ns)
        sh("ip", "link", "add", "br0", "type", "bridge", "mcast_snooping", "0", ns=ns)
        sh("ip", "addr", "add", self.kernel4 + "/24", "dev", "br0", ns=ns)
        sh("ip", "-6", "addr", "add", self.kernel6 + "/64", "dev", "br0", "nodad", ns=ns)
        sh("ip", "link", "set", "br0", "up", ns=ns)
        for tap in self.taps:
            sh("ip", "tuntap", "add", "dev", tap, "mode", "tap", *(["multi_queue"] if self.multi_queue else []),
               ns=ns)
            sh("ip", "link", "set", tap, "master", "br0", "up", ns=ns)

    def remove_devices(self):
        for tap in self.taps:
            sh("ip", "link", "del", tap, ns=self.ns, ok=False)
        sh("ip", "link", "del", "br0", ns=self.ns, ok=False)

    def start(self, name, argv, schema=None):
        return self.spawn(name, argv, self.ns, schema)

    def wait_link_up(self, taps=None, timeout=10):
        """Until the TAPs have carrier and the bridge forwards (the kernel drops
        frames sent before the link watcher has activated the devices)."""
        taps = taps or self.taps
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            out = sh("ip", "-o", "link", "show", ns=self.ns).stdout
            br = sh("bridge", "link", "show", ns=self.ns).stdout
            up = all(("%s:" % t) in out and "LOWER_UP" in [l for l in out.splitlines() if " %s:" % t in l][0]
                     for t in taps)
            brl = [l for l in out.splitlines() if " br0:" in l]
            if up and brl and "LOWER_UP" in brl[0] and "state UP" in brl[0] \
                    and br.count("state forwarding") >= len(taps):
                return
            time.sleep(0.05)
        raise Failure("links not up in %.0f s:\n%s\n%s" % (timeout, out, br))


class Case:
    def __init__(self, args):
        self.bin = args.bin
        self.tmp = args.tmp
        self.schema = json_lines.load_schema()

    def cm(self, net, name, *argv, ip=None, tap="tap0"):
        ip = ip or "10.99.%d.2/24" % net.n
        return net.start(name, [self.bin] + list(argv) + ["--tap", tap, "--ip", ip, "--json"], self.schema)

    def peer(self, net, name, *argv):
        return net.start(name, ["python3", PEER] + list(argv))

    def pcap(self, name):
        path = os.path.join(self.tmp, "%s-%d.pcap" % (name, os.getpid()))
        if os.path.exists(path):
            os.remove(path)
        return path


def stats_of(proc):
    s = proc.events("stats")
    check(len(s) == 1, "%s: expected one stats line, got %d" % (proc.name, len(s)))
    return s[0]


def expect_exit(proc, code, timeout=30):
    rc = proc.finish(timeout)
    check(rc == code, "%s: exit code %s, expected %s (stderr: %s)" % (proc.name, rc, code, proc.stderr.strip()))
    return stats_of(proc) if proc.name.startswith("cm") else None


# ---------------------------------------------------------------- cases

def listen_case(c, subnet, rev, p2p):
    pd_rep = "hello from iwarp-cm rev%d" % rev
    with Net("listen-rev%d" % rev, subnet) as net:
        cm = c.cm(net, "cm", "listen", "--port", str(PORT), "--count", "1", "--pdata", pd_rep,
                  "--ird", "4", "--ord", "2")
        cm.wait_for("listening")
        net.wait_link_up()
        args = ["client", "--to", "%s:%d" % ("10.99.%d.2" % subnet, PORT), "--rev", str(rev),
                "--pdata", "kernel client rev%d" % rev, "--ird", "8", "--ord", "4"]
        if p2p:
            args += ["--p2p", "--crc"]
        cli = c.peer(net, "client", *args)
        rep = cli.wait_for("reply")
        check(not rep["reject"] and rep["rev"] == rev, "reply: %s" % rep)
        check(rep["pdata"] == pd_rep, "reply private data %r" % rep["pdata"])
        if rev == 2:
            check(rep["ird"] is not None and rep["p2p"] == p2p, "rev 2 reply word: %s" % rep)
        closed = cli.wait_for("closed")
        check(closed["peer_eof"] and not closed["reset_by_peer"], "client close: %s" % closed)
        check(cli.finish() == 0, "client failed")
        st = expect_exit(cm, 0)
        req = cm.events("connect_request")[0]
        check(req["pdata"] == "kernel client rev%d" % rev and req["mpa_rev"] == rev, "request: %s" % req)
        # mpa_peer.py offers a SEND RTR with --p2p (RFC 6581), none otherwise.
        check(req["p2p"] is p2p and req["rtr_offered"] == (["send"] if p2p else []), "request RTR: %s" % req)
        est = cm.events("established")[0]
        check(est["mpa_rev"] == rev, "established: %s" % est)
        if p2p:
            check(est["rtr"] == "send" and est["crc"] is True, "p2p established: %s" % est)
        disc = cm.events("disconnected")[0]
        check(disc["status"] == 0, "disconnect: %s" % disc)
        check(st["live_nodes"] == 0 and st["established"] == 1, "stats: %s" % st)


def case_listen_rev1(c):
    listen_case(c, 11, 1, False)


def case_listen_rev2(c):
    listen_case(c, 12, 2, True)


def case_listen_reject(c):
    with Net("listen-reject", 13) as net:
        cm = c.cm(net, "cm", "listen", "--port", str(PORT), "--count", "1", "--reject", "--pdata", "go away")
        cm.wait_for("listening")
        net.wait_link_up()
        cli = c.peer(net, "client", "client", "--to", "10.99.13.2:%d" % PORT, "--pdata", "may I?")
        rep = cli.wait_for("reply")
        check(rep["reject"] and rep["pdata"] == "go away", "reject reply: %s" % rep)
        check(cli.wait_for("closed")["peer_eof"], "client did not see the CM's FIN")
        check(cli.finish() == 0, "client failed")
        st = expect_exit(cm, 0)
        check(len(cm.events("reject_sent")) == 1 and st["rejects"] == 1 and st["live_nodes"] == 0, "stats %s" % st)


def connect_case(c, name, subnet, server_close, cm_args, cm_exit, server_check, family=4):
    with Net(name, subnet) as net:
        bind = "%s:%d" % (net.kernel4, PORT) if family == 4 else "[%s]:%d" % (net.kernel6, PORT)
        srv = c.peer(net, "server", "server", "--bind", bind, "--pdata", "kernel says hi", "--close", server_close)
        srv.wait_for("listening")
        cm_ip = "10.99.%d.2/24" % subnet if family == 4 else "fd99:0:0:%d::2/64" % subnet
        cm = c.cm(net, "cm", "connect", "--to", bind, "--pdata", "cm says hi", "--no-p2p", *cm_args, ip=cm_ip)
        req = srv.wait_for("request")
        check(req["pdata"].endswith("cm says hi"), "request: %s" % req)
        est = cm.wait_for("established")
        check(est["pdata"] == "kernel says hi", "established: %s" % est)
        closed = srv.wait_for("closed")
        server_check(closed)
        check(srv.finish() == 0, "server failed")
        st = expect_exit(cm, cm_exit)
        check(st["live_nodes"] == 0, "stats: %s" % st)
        print("  connect time %s ms" % st.get("connect_ms"), flush=True)
        return cm, st


def case_connect_close_by_cm(c):
    cm, _ = connect_case(c, "close-cm", 21, "wait", ["--hold", "0.2"], 0,
                         lambda s: check(s["peer_eof"] and not s["reset_by_peer"], "server: %s" % s))
    check(len(cm.events("close_sent")) == 1 and cm.events("disconnected")[0]["status"] == 0, "close events")


def case_connect_close_by_kernel(c):
    cm, _ = connect_case(c, "close-kernel", 22, "graceful", ["--hold", "30"], 0,
                         lambda s: check(s["peer_eof"], "server: %s" % s))
    check(not cm.events("close_sent"), "the CM closed first")
    check(cm.events("disconnected")[0]["status"] == 0, "disconnect status")


def case_connect_rst_by_cm(c):
    cm, st = connect_case(c, "rst-cm", 23, "wait", ["--hold", "0.2", "--abort"], 0,
                          lambda s: check(s["reset_by_peer"], "server saw no reset: %s" % s))
    check(len(cm.events("abort_sent")) == 1 and st["resets_sent"] >= 1, "abort: %s" % st)


def case_connect_rst_by_kernel(c):
    cm, st = connect_case(c, "rst-kernel", 24, "rst", ["--hold", "30"], 3, lambda s: None)
    check(cm.events("disconnected")[0]["status"] == -104 and st["resets_received"] == 1, "reset: %s" % st)
    check("reset by peer" in cm.stderr, "reason line: %r" % cm.stderr)


def case_connect_close_never(c):
    """The kernel reads our FIN and never closes its side (issue 37): our
    close runs out after its 10 s limit (exit 5), and the connection is
    reset (reset_sent), which the kernel sees; nothing is left open."""
    start = time.monotonic()
    cm, st = connect_case(c, "close-never", 39, "linger", ["--hold", "0.2"], 5,
                          lambda s: check(s["peer_eof"] and s["reset_by_peer"], "server saw no reset: %s" % s))
    took = time.monotonic() - start
    check(took < 0.2 + 10 + 8, "connect took %.1f s" % took)
    resets = cm.events("reset_sent")
    check(len(resets) == 1 and resets[0]["why"] == "not closed within the close limit", "reset_sent: %s" % resets)
    check(st["resets_sent"] >= 1 and "did not complete" in cm.stderr, "stats: %s" % st)


def connect_signal_case(c, name, subnet, sig, code, close="wait"):
    """A signal while `connect` holds a connection: the kernel server sees the
    CM's FIN (or, with close=linger, the reset after the grace limit) and the
    exit code names the signal."""
    with Net(name, subnet) as net:
        srv = c.peer(net, "server", "server", "--bind", "%s:%d" % (net.kernel4, PORT), "--close", close)
        srv.wait_for("listening")
        cm = c.cm(net, "cm", "connect", "--to", "%s:%d" % (net.kernel4, PORT), "--no-p2p", "--hold", "60")
        cm.wait_for("established")
        cm.p.send_signal(sig)
        closed = srv.wait_for("closed", timeout=10)
        check(closed["peer_eof"], "server saw no FIN: %s" % closed)
        check(srv.finish() == 0, "server failed")
        st = expect_exit(cm, code, timeout=10)
        check(st["live_nodes"] == 0 and st["result"] == "failed", "stats: %s" % st)
        check(("SIGTERM" if sig == signal.SIGTERM else "SIGINT") in cm.stderr, "reason: %r" % cm.stderr)
        return cm, closed, st


def case_sigterm(c):
    cm, closed, _ = connect_signal_case(c, "sigterm", 30, signal.SIGTERM, 143)
    check(not closed["reset_by_peer"] and cm.events("disconnected")[0]["status"] == 0, "not graceful")
    check(not cm.events("reset_sent"), "reset although the close completed")


def case_connect_sigint(c):
    cm, closed, _ = connect_signal_case(c, "connect-sigint", 31, signal.SIGINT, 130)
    check(not closed["reset_by_peer"] and cm.events("disconnected")[0]["status"] == 0, "not graceful")


def case_connect_sigint_linger(c):
    """The kernel never closes its side: after the grace limit the CM resets."""
    cm, closed, st = connect_signal_case(c, "connect-linger", 32, signal.SIGINT, 130, close="linger")
    check(closed["reset_by_peer"], "server saw no reset after the grace limit: %s" % closed)
    check(len(cm.events("reset_sent")) == 1 and st["resets_sent"] >= 1, "no reset_sent: %s" % st)


def listen_signal_case(c, name, subnet, sig, code):
    """A signal while `listen` holds an accepted connection: the kernel client
    sees the CM's FIN, and the exit code names the signal."""
    with Net(name, subnet) as net:
        cm = c.cm(net, "cm", "listen", "--port", str(PORT))
        cm.wait_for("listening")
        net.wait_link_up()
        cli = c.peer(net, "client", "client", "--to", "10.99.%d.2:%d" % (subnet, PORT), "--close", "wait")
        check(not cli.wait_for("reply")["reject"], "rejected")
        cm.wait_for("established")
        cm.p.send_signal(sig)
        closed = cli.wait_for("closed", timeout=10)
        check(closed["peer_eof"] and not closed["reset_by_peer"], "client saw no FIN: %s" % closed)
        check(cli.finish() == 0, "client failed")
        st = expect_exit(cm, code, timeout=10)
        check(st["live_nodes"] == 0 and st["result"] == "interrupted", "stats: %s" % st)
        check(cm.events("disconnected")[0]["status"] == 0 and not cm.events("reset_sent"), "not graceful")
        # The connection it served counts, closed after the signal.
        check(re.search(r"after 1 connection\b", cm.stderr), "reason: %r" % cm.stderr)


def case_listen_sigint(c):
    listen_signal_case(c, "listen-sigint", 33, signal.SIGINT, 130)


def case_listen_sigterm(c):
    listen_signal_case(c, "listen-sigterm", 34, signal.SIGTERM, 143)


def case_listen_threads(c):
    """listen --threads 2 on a multi-queue TAP: kernel clients at once, each
    accepted by the thread that owns its 4-tuple (frames that arrive on the
    other queue are handed over), every one set up and closed."""
    n = 8
    with Net("listen-threads", 71, multi_queue=True) as net:
        cm = c.cm(net, "cm", "listen", "--port", str(PORT), "--count", str(n), "--threads", "2",
                  "--pdata", "threads")
        check(cm.wait_for("listening")["threads"] == 2, "listening line")
        net.wait_link_up()
        clis = [c.peer(net, "client%d" % i, "client", "--to", "10.99.71.2:%d" % PORT, "--pdata", "c%d" % i)
                for i in range(n)]
        for cli in clis:
            rep = cli.wait_for("reply")
            check(not rep["reject"] and rep["pdata"] == "threads", "reply: %s" % rep)
            check(cli.wait_for("closed")["peer_eof"], "client close")
            check(cli.finish() == 0, "client failed")
        st = expect_exit(cm, 0)
        got = sorted(r["pdata"] for r in cm.events("connect_request"))
        check(got == sorted("c%d" % i for i in range(n)), "requests: %s" % got)
        check(st["established"] == n and st["live_nodes"] == 0 and st["threads"] == 2, "stats: %s" % st)
        print("  %d frames handed between threads" % st["handed_off"], flush=True)


def case_listen_threads_default(c):
    """Without --threads, listen on a multi-queue TAP runs one thread per CPU."""
    with Net("listen-threads-def", 73, multi_queue=True) as net:
        cm = c.cm(net, "cm", "listen", "--port", str(PORT), "--count", "1")
        lst = cm.wait_for("listening")
        cpus = len(os.sched_getaffinity(0))
        check(lst.get("threads", 1) == cpus, "threads %s on %d CPUs" % (lst.get("threads"), cpus))
        net.wait_link_up()
        cli = c.peer(net, "client", "client", "--to", "10.99.73.2:%d" % PORT)
        check(not cli.wait_for("reply")["reject"], "rejected")
        check(cli.finish() == 0, "client failed")
        st = expect_exit(cm, 0)
        check(st["established"] == 1 and st["live_nodes"] == 0, "stats: %s" % st)


def case_listen_threads_sigint(c):
    """SIGINT to listen --threads 2 holding a connection: its thread closes it
    gracefully, the exit code names the signal."""
    with Net("listen-threads-sig", 72, multi_queue=True) as net:
        cm = c.cm(net, "cm", "listen", "--port", str(PORT), "--threads", "2")
        cm.wait_for("listening")
        net.wait_link_up()
        cli = c.peer(net, "client", "client", "--to", "10.99.72.2:%d" % PORT, "--close", "wait")
        check(not cli.wait_for("reply")["reject"], "rejected")
        cm.wait_for("established")
        cm.p.send_signal(signal.SIGINT)
        closed = cli.wait_for("closed", timeout=10)
        check(closed["peer_eof"] and not closed["reset_by_peer"], "client saw no FIN: %s" % closed)
        check(cli.finish() == 0, "client failed")
        st = expect_exit(cm, 130, timeout=10)
        check(st["live_nodes"] == 0 and st["result"] == "interrupted", "stats: %s" % st)


def case_connect_refused(c):
    """Nobody listens on the kernel's port: its RST to our SYN is a refusal, not an MPA reject."""
    with Net("connect-refused", 35) as net:
        cm = c.cm(net, "cm", "connect", "--to", "%s:%d" % (net.kernel4, PORT))
        st = expect_exit(cm, 3)
        check("refused (reset by peer)" in cm.stderr and "MPA reject" not in cm.stderr, "reason: %r" % cm.stderr)
        check(st["resets_received"] == 1, "stats: %s" % st)


def case_connect_timeout(c):
    """The kernel completes the handshake (its listen queue) but nobody
    answers the MPA request: connect exits 5, and the reason gives --timeout
    as it was written ("12.5 s", not "12.500000 s"). 12.5 s lies past the core's
    default MPA reply timeout (10 s after the request, which leaves within the
    first second): the reply wait follows --timeout, so the deadline, not the
    reply timer, ends the attempt."""
    with Net("connect-timeout", 77) as net:
        expect_deadline_unanswered(c, net, PORT, ["connect", "--to", "%s:%d" % (net.kernel4, PORT)], "12.5")


def expect_deadline_unanswered(c, net, port, command, timeout):
    """A kernel listener on `port` completes the handshake but nobody answers
    the MPA request: the iwarp-cm `command` with --timeout `timeout` exits 5,
    and its reason gives the deadline as it was written."""
    listener = ("import signal, socket\n"
                "s = socket.socket()\n"
                "s.bind(('%s', %d))\n"
                "s.listen(4)\n"
                "print('{\"event\": \"listening\"}', flush=True)\n"
                "signal.pause()\n" % (net.kernel4, port))
    srv = net.start("server", ["python3", "-c", listener])
    srv.wait_for("listening")
    try:
        cm = c.cm(net, "cm", *command, "--timeout", timeout)
        expect_exit(cm, 5, timeout=30)
        check("timed out after %s s" % timeout in cm.stderr, "reason: %r" % cm.stderr)
    finally:
        srv.kill()


def case_connect_mpa_reject(c):
    """The kernel peer answers with an MPA reject: exit 4, named as such."""
    with Net("connect-reject", 36) as net:
        srv = c.peer(net, "server", "server", "--bind", "%s:%d" % (net.kernel4, PORT), "--reject",
                     "--pdata", "no thanks")
        srv.wait_for("listening")
        cm = c.cm(net, "cm", "connect", "--to", "%s:%d" % (net.kernel4, PORT))
        check(srv.finish() == 0, "server failed")
        expect_exit(cm, 4)
        check("rejected by peer (MPA reject)" in cm.stderr, "reason: %r" % cm.stderr)
        check(cm.events("rejected")[0]["pdata"] == "no thanks", "reject event: %s" % cm.events("rejected"))


def case_pdata_binary(c):
    """Binary private data both ways: --pdata-file on listen, --pdata-hex on connect (two CMs)."""
    with Net("pdata-binary", 38, taps=("tap0", "tap1")) as net:
        path = os.path.join(c.tmp, "pdata-%d.bin" % os.getpid())
        with open(path, "wb") as f:
            f.write(bytes([0, 255, 16, 10, 13, 127]))
        lst = c.cm(net, "cm-listen", "listen", "--port", str(PORT), "--count", "1", "--pdata-file", path,
                   ip="10.99.38.3/24", tap="tap1")
        lst.wait_for("listening")
        net.wait_link_up(taps=("tap1",))
        con = c.cm(net, "cm-connect", "connect", "--to", "10.99.38.3:%d" % PORT, "--pdata-hex", "00ff7f80",
                   "--hold", "0.1")
        est = con.wait_for("established")
        check(est["pdata_hex"] == "00ff100a0d7f" and est["pdata"] is None, "reply bytes: %s" % est)
        expect_exit(con, 0)
        expect_exit(lst, 0)
        req = lst.events("connect_request")[0]
        check(req["pdata_hex"] == "00ff7f80", "request bytes: %s" % req)
        os.remove(path)


def case_connect_count(c):
    """cmtime-style: 20 connections, 4 in flight, against a kernel-socket MPA server."""
    with Net("connect-count", 37) as net:
        srv = c.peer(net, "server", "server", "--bind", "%s:%d" % (net.kernel4, PORT), "--close", "wait",
                     "--count", "20")
        srv.wait_for("listening")
        cm = c.cm(net, "cm", "connect", "--to", "%s:%d" % (net.kernel4, PORT), "--no-p2p", "--count", "20",
                  "--parallel", "4", "--timeout", "30")
        st = expect_exit(cm, 0, timeout=90)
        check(srv.finish() == 0, "server failed")
        check(len(srv.events("closed")) == 20 and all(e["peer_eof"] for e in srv.events("closed")),
              "server closes: %s" % srv.events("closed"))
        t = cm.events("cmtime")
        check(len(t) == 1, "expected one cmtime line, got %d" % len(t))
        t = t[0]
        check(t["completed"] == 20 and t["failed"] == 0 and st["established"] == 20, "cmtime: %s" % t)
        for phase in ("resolve", "tcp_handshake", "mpa_exchange", "established", "close"):
            f = t[phase + "_ms"]
            check(0 <= f["min"] <= f["median"] <= f["p99"] <= f["max"], "%s not ordered: %s" % (phase, f))
        check(t["established_ms"]["min"] >= t["mpa_exchange_ms"]["min"], "phases: %s" % t)
        print("  cmtime: %s" % {k: v for k, v in t.items() if k.endswith("_ms")}, flush=True)


def start_on_tty(net, argv):
    """Starts argv in the namespace of `net` with stderr on a new
    pseudo-terminal (bytes as written: raw) and stdout on a pipe: the
    process and the terminal's master side, for read_tty and end_on_tty."""
    master, slave = pty.openpty()
    tty.setraw(slave)
    p = subprocess.Popen(["ip", "netns", "exec", net.ns] + argv, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    return p, master


def end_on_tty(p, master):
    """Kills p if it still runs, and closes its terminal."""
    if p.poll() is None:
        p.kill()
        p.wait()
    os.close(master)


def read_tty(master, p, seconds):
    """What process p writes to the terminal of `master` within `seconds` (or
    until it exits)."""
    out = b""
    end = time.monotonic() + seconds
    while time.monotonic() < end and p.poll() is None:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                out += os.read(master, 4096)
            except OSError:
                break
    return out.decode(errors="replace")



def case_connect_progress(c):
    """connect --send-bytes with stderr on a terminal draws a progress line
    there (bytes sent and received of the totals, redrawn with '\r'); the
    listen beside it, whose stderr is a pipe, draws none. Both ends ours."""
    n = 50_000_000
    with Net("connect-progress", 82, taps=("tap0", "tap1")) as net:
        srv = c.cm(net, "cm-server", "listen", "--port", str(PORT), "--count", "1", "--expect-bytes", str(n),
                   ip="10.99.82.3/24", tap="tap1")
        srv.wait_for("listening")
        net.wait_link_up(taps=("tap1",))
        p, master = start_on_tty(net, [c.bin, "connect", "--to", "10.99.82.3:%d" % PORT, "--send-bytes", str(n),
                                       "--tap", "tap0", "--ip", "10.99.82.2/24"])
        try:
            term = read_tty(master, p, 120)
            check(p.wait(timeout=30) == 0, "connect: exit %s: %r" % (p.returncode, term[-300:]))
        finally:
            end_on_tty(p, master)
        shown = re.findall(r"\rconnect: sent ([0-9.]+) of 50.0 MB, received 0.0 of 0.0 MB", term)
        print("  %d redraws, sent %s" % (len(shown), shown), flush=True)
        check(shown and float(shown[0]) < 50.0, "no progress line on the terminal: %r" % term[-300:])
        check([float(x) for x in shown] == sorted(float(x) for x in shown), "sent went backwards: %s" % shown)
        check(expect_exit(srv, 0, timeout=60)["result"] == "ok", "listen failed")
        check("\r" not in srv.stderr, "listen on a pipe drew: %r" % srv.stderr[:300])


def shard_of(a, pa, b, pb, shards, key=0):
    """Our flow hash (include/iwcm/shard.hpp, src/shard.cpp) of an IPv4
    4-tuple and its shard among `shards`: written again here from the
    description, so that the test checks the C++ against it."""
    m = (1 << 64) - 1

    def mix64(z):
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & m
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & m
        return z ^ (z >> 31)

    def load32(raw):  # as the wire has it, loaded little-endian (x86)
        return int.from_bytes(raw, "little")

    both = load32(pa.to_bytes(2, "big") + pb.to_bytes(2, "big"))
    lo, hi = both & 0xffff, both >> 16
    ports = min(lo, hi) | (max(lo, hi) << 16)
    addr = load32(bytes(map(int, a.split(".")))) ^ load32(bytes(map(int, b.split("."))))
    h = mix64(addr ^ key ^ (ports << 32))
    return ((h & 0xffffffff) * shards) >> 32


def case_connect_threads(c):
    """connect --count 24 --parallel 8 --threads 2 on a multi-queue TAP against
    a kernel-socket MPA server: each thread opens its half, on ephemeral ports
    that hash back to it (checked from the server's side with the hash
    written again in Python), every one set up and closed."""
    n, threads = 24, 2
    with Net("connect-threads", 74, multi_queue=True) as net:
        srv = c.peer(net, "server", "server", "--bind", "%s:%d" % (net.kernel4, PORT), "--close", "wait",
                     "--count", str(n))
        srv.wait_for("listening")
        cm = c.cm(net, "cm", "connect", "--to", "%s:%d" % (net.kernel4, PORT), "--no-p2p", "--count", str(n),
                  "--parallel", "8", "--threads", str(threads), "--timeout", "30")
        st = expect_exit(cm, 0, timeout=90)
        check(srv.finish() == 0, "server failed")
        check(len(srv.events("closed")) == n and all(e["peer_eof"] for e in srv.events("closed")),
              "server closes: %s" % srv.events("closed"))
        t = cm.events("cmtime")
        check(len(t) == 1 and t[0]["completed"] == n and t[0]["failed"] == 0, "cmtime: %s" % t)
        check(st["established"] == n and st["live_nodes"] == 0 and st["threads"] == threads,
              "stats: %s" % st)
        ports = [int(e["remote"].strip("()").split(",")[1]) for e in srv.events("accepted")]
        per = [0] * threads
        for p in ports:
            per[shard_of("10.99.74.2", p, net.kernel4, PORT, threads)] += 1
        check(per == [n // threads] * threads, "connections per thread by our hash: %s" % per)
        print("  per thread %s, %d frames handed between threads" % (per, st["handed_off"]), flush=True)


def case_ipv6(c):
    connect_case(c, "ipv6", 25, "wait", ["--hold", "0.2"], 0,
                 lambda s: check(s["peer_eof"], "server: %s" % s), family=6)


def case_loss(c):
    """20 % of the kernel's frames toward the CM dropped by nftables: every
    connection still establishes; the CM's retransmission counter moves.
    Nearly only a lost SYN-ACK makes the CM retransmit (the kernel resends its
    own lost frames), one connection in five: the connections go on until one
    has, at most 40 (none in 40 is 0.8^40, 0.013 %). Such a connection is the
    one whose MPA reply is slowest to come again: without a round-trip sample
    from the handshake the kernel starts its retransmission timer at 3 s
    (RFC 6298 section 5.7), so a lost reply is resent at 3, 9, 21 and 45 s.
    --timeout 60 gives the reply all five sendings (all lost: 0.2^5, 0.03 %);
    the default 10 s gave it two resends and failed about once in 125 such
    connections."""
    subnet, attempts = 26, 40
    with Net("loss", subnet) as net:
        rules = ("add table inet iwcm_loss\n"
                 "add chain inet iwcm_loss out { type filter hook output priority 0; policy accept; }\n"
                 "add rule inet iwcm_loss out ip daddr 10.99.%d.2 numgen random mod 100 < 20 counter drop\n" % subnet)
        r = subprocess.run(["ip", "netns", "exec", net.ns, "nft", "-f", "-"], input=rules, text=True,
                           capture_output=True, timeout=30)
        check(r.returncode == 0, "nft failed (nftables needed): %s" % r.stderr)
        srv = c.peer(net, "server", "server", "--bind", "%s:%d" % (net.kernel4, PORT), "--pdata", "lossy",
                     "--close", "wait", "--count", str(attempts), "--timeout", "60")
        srv.wait_for("listening")
        retrans, done = 0, 0
        while done < attempts and (retrans == 0 or done < 3):
            cm = c.cm(net, "cm%d" % done, "connect", "--to", "%s:%d" % (net.kernel4, PORT), "--no-p2p",
                      "--hold", "0.1", "--timeout", "60")
            st = expect_exit(cm, 0, timeout=90)
            check(st["established"] == 1, "attempt %d did not establish" % done)
            retrans += st["retransmissions"]
            done += 1
        out = sh("nft", "list", "chain", "inet", "iwcm_loss", "out", ns=net.ns).stdout
        print("  %d connections, %d CM retransmissions; nft: %s" % (done, retrans, out.split("counter")[-1].strip()))
        check(retrans > 0, "no retransmission in %d connections with 20%% loss" % done)
        srv.kill()


def vlan_pair(c, net, pcap, listen_args, connect_args):
    """Two CMs on VLAN 100 through the bridge: `listen` at .3 on tap1, `connect`
    (capturing to pcap) at .2 on tap0; both exit 0. Returns connect's established line."""
    lst = c.cm(net, "cm-listen", "listen", "--port", str(PORT), "--count", "1", "--vlan", "100",
               *listen_args, ip="10.99.%d.3/24" % net.n, tap="tap1")
    lst.wait_for("listening")
    net.wait_link_up(taps=("tap1",))
    con = c.cm(net, "cm-connect", "connect", "--to", "10.99.%d.3:%d" % (net.n, PORT), "--vlan", "100",
               "--hold", "0.2", "--pcap", pcap, *connect_args)
    est = con.wait_for("established")
    check(est["vlan"] == 100, "not established on VLAN 100: %s" % est)
    expect_exit(con, 0)
    expect_exit(lst, 0)
    return est


def case_vlan(c):
    """VLAN 100 both ways: two CMs through the kernel's bridge (this kernel has
    no 802.1Q support for its own stack: CONFIG_VLAN_8021Q is off), checked in
    the capture: every IP and ARP frame carries tag 100."""
    with Net("vlan", 27, taps=("tap0", "tap1")) as net:
        pcap = c.pcap("vlan")
        est = vlan_pair(c, net, pcap, ["--pdata", "tagged reply"], ["--pdata", "tagged request"])
        check(est["pdata"] == "tagged reply", "established: %s" % est)
        lines = tshark(pcap, "-T", "fields", "-e", "vlan.id", "-e", "_ws.col.Protocol",
                       "-Y", "arp or tcp").splitlines()
        check(len(lines) >= 8 and all(l.split("\t")[0] == "100" for l in lines), "untagged frames: %s" % lines)


def tshark(pcap, *args):
    # rpcordma is disabled: Wireshark's RPC-over-RDMA heuristic tries to
    # read an RPC header from the payload of every RDMAP Send and throws
    # "Malformed Packet" on the RTR, a Send that by definition (RFC 6581
    # section 6) has no payload. The MPA, DDP and RDMAP layers decode cleanly.
    r = subprocess.run(["tshark", "-r", pcap, "-o", "tcp.check_checksum:TRUE", "-o", "ip.check_checksum:TRUE",
                        "--enable-heuristic", "iwarp_mpa_tcp", "--disable-protocol", "rpcordma"]
                       + list(args),
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "tshark failed: %s" % r.stderr)
    return r.stdout


def check_capture(pcap, net=None):
    """Nothing in the capture is malformed or has a bad checksum. A TCP checksum
    that comes out zero may be sent as 0xffff, its ones'-complement twin (RFC 1624
    section 3, and every receiver accepts both); the Linux kernel's TCP does so
    now and then (about one segment in 65 536, as the bytes fall), so frames from
    `net`'s kernel addresses may. Ours never do: we send ~sum, and a sum over a
    pseudo-header is never zero."""
    ffff = ""
    if net is not None:
        ffff = " and !(tcp.checksum.ffff and (ip.src == %s or ipv6.src == %s))" % (net.kernel4, net.kernel6)
    bad = tshark(pcap, "-Y", "_ws.malformed or (tcp.checksum.status == 0%s) or ip.checksum.status == 0 "
                             "or _ws.expert.severity == error" % ffff)
    check(bad.strip() == "", "malformed or bad checksums:\n%s" % bad)


def mpa_fields(pcap):
    out = tshark(pcap, "-Y", "iwarp_mpa.req or iwarp_mpa.rep", "-T", "fields", "-e", "iwarp_mpa.key.req",
                 "-e", "iwarp_mpa.key.rep", "-e", "iwarp_mpa.crc_flag", "-e", "iwarp_mpa.rej_flag",
                 "-e", "iwarp_mpa.rev", "-e", "iwarp_mpa.pdlength")
    return [l.split("\t") for l in out.splitlines()]


def case_pcap(c):
    """The captures of both directions in tshark: no malformed packet or bad
    checksum; MPA request and reply decoded; the RTR FPDU with a good CRC32c."""
    with Net("pcap", 28) as net:
        # CM initiator, revision 2, peer-to-peer with CRC: the CM sends the RTR.
        pcap = c.pcap("connect")
        srv = c.peer(net, "server", "server", "--bind", "%s:%d" % (net.kernel4, PORT), "--pdata", "12345",
                     "--p2p", "--close", "wait")
        srv.wait_for("listening")
        cm = c.cm(net, "cm", "connect", "--to", "%s:%d" % (net.kernel4, PORT), "--pdata", "abc", "--crc",
                  "--hold", "0.2", "--pcap", pcap)
        rtr = srv.wait_for("rtr")
        check(rtr["type"] == "send" and rtr["crc_ok"], "RTR at the kernel side: %s" % rtr)
        check(srv.finish() == 0, "server failed")
        expect_exit(cm, 0)
        check_capture(pcap, net)
        rows = mpa_fields(pcap)
        # Request: key, C set, rev 2, 4 + 3 bytes; reply: C, rev 2, 4 + 5 bytes.
        check(len(rows) == 2, "MPA frames: %s" % rows)
        check(rows[0][0] == "4d504120494420526571204672616d65" and rows[0][2] == "1" and rows[0][4] == "2"
              and rows[0][5] == "7", "request: %s" % rows[0])
        check(rows[1][1] == "4d504120494420526570204672616d65" and rows[1][2] == "1" and rows[1][3] == "0"
              and rows[1][5] == "9", "reply: %s" % rows[1])
        crc = tshark(pcap, "-Y", "iwarp_mpa.fpdu", "-T", "fields", "-e", "iwarp_mpa.ulpdulength",
                     "-e", "iwarp_mpa.crc_check", "-e", "iwarp_rdma.opcode").split()
        print("  RTR FPDU fields: %s" % crc, flush=True)
        check(len(crc) >= 2 and crc[0] == "18", "RTR FPDU not decoded: %s" % crc)
        good = tshark(pcap, "-Y", "iwarp_mpa.fpdu", "-V")
        check(good.count("(Good CRC32)") == 1 and "Bad CRC" not in good and "OpCode: Send (0x3)" in good,
              "RTR CRC not reported good:\n%s" % good[-1500:])
        # CM responder, revision 1, with reject: the reject flag and private data.
        pcap2 = c.pcap("listen")
        lst = c.cm(net, "cm2", "listen", "--port", str(PORT), "--count", "1", "--reject", "--pdata", "no",
                   "--pcap", pcap2)
        lst.wait_for("listening")
        net.wait_link_up()
        cli = c.peer(net, "client", "client", "--to", "10.99.28.2:%d" % PORT, "--rev", "1", "--pdata", "x")
        check(cli.wait_for("reply")["reject"], "no reject")
        check(cli.finish() == 0, "client failed")
        expect_exit(lst, 0)
        check_capture(pcap2, net)
        rows = mpa_fields(pcap2)
        check(len(rows) == 2 and rows[0][4] == "1" and rows[0][5] == "1" and rows[1][3] == "1"
              and rows[1][5] == "2", "rev 1 request / reject: %s" % rows)


def case_resolve_fail(c):
    """connect to an address nobody answers: a clear resolution error, exit 7."""
    with Net("resolve-fail", 29) as net:
        cm = c.cm(net, "cm", "connect", "--to", "10.99.29.77:%d" % PORT, "--timeout", "10")
        st = expect_exit(cm, 7)
        check("cannot resolve 10.99.29.77" in cm.stderr and st["arp_requests_sent"] == 3, "resolution: %s" % st)


RAW_SYN = os.path.join(HERE, "raw_syn.py")


def ip_options_listen(c, net, family, variants, refused):
    """A listener of `family` gets raw_syn.py's crafted SYNs (the last one plain):
    each one outside `refused` is answered with a SYN-ACK like the plain SYN's, no
    IP options or extension headers in it; the refused ones (fragments) get
    nothing and are the listener's only drops."""
    cm_ip = "10.99.%d.2/24" % net.n if family == 4 else "fd99:0:0:%d::2/64" % net.n
    cm = c.cm(net, "cm%d" % family, "listen", "--port", str(PORT), ip=cm_ip)
    mac = cm.wait_for("listening")["mac"]
    net.wait_link_up()
    kernel = net.kernel4 if family == 4 else net.kernel6
    raw = net.start("raw%d" % family, ["python3", RAW_SYN, "--dev", "br0", "--dst-mac", mac, "--src", kernel,
                                       "--dst", cm_ip.split("/")[0], "--port", str(PORT)] + variants)
    check(raw.finish(timeout=30) == 0, "raw_syn.py failed: %s" % raw.stderr)
    answers = {a["variant"]: a for a in raw.events("answer")}
    plain = answers["plain"]
    check(plain["answered"] and plain["flags"] == 0x12 and plain["ack_ok"], "plain SYN: %s" % plain)
    check(plain.get("ihl", 5) == 5 and plain.get("next_header", 6) == 6, "plain SYN-ACK: %s" % plain)
    shape = ("flags", "window", "tcp_options", "ihl", "next_header", "ack_ok")
    for v in variants:
        a = answers[v]
        if v in refused:
            check(not a["answered"], "%s was answered: %s" % (v, a))
        else:
            check(a["answered"] and all(a.get(k) == plain.get(k) for k in shape),
                  "%s: %s, plain: %s" % (v, a, plain))
    cm.p.terminate()
    st = expect_exit(cm, 143)  # SIGTERM (docs/cli.md, exit codes)
    check(st["core_dropped"] == len(refused), "drops %s for %d refused SYNs" % (st["core_dropped"], len(refused)))
    print("  IPv%d: %d crafted SYNs answered like the plain one, %d fragments dropped" %
          (family, len(variants) - 1 - len(refused), st["core_dropped"]), flush=True)


def case_ip_options(c):
    """SYNs with an IPv4 Router Alert, NOP/EOL padding, an IPv6 hop-by-hop header
    and a hop-by-hop, destination options and routing chain get the plain SYN's
    answer; IPv4 and IPv6 fragments get none and are counted as drops."""
    with Net("ip-options", 41) as net:
        ip_options_listen(c, net, 4, ["router_alert", "nop_eol", "fragment", "fragment_offset", "plain"],
                          {"fragment", "fragment_offset"})
        ip_options_listen(c, net, 6, ["hop_by_hop", "chain", "fragment", "plain"], {"fragment"})


def case_syn_flood(c):
    """A few thousand SYNs from a raw socket against `listen --backlog 4`
    (random source ports and addresses of the namespace's /24): a kernel
    client connecting during the flood gets its SYN-ACK (a SYN cookie) at
    once, and its MPA exchange completes within 2 s."""
    subnet = 31
    with Net("syn-flood", subnet) as net:
        cm = c.cm(net, "cm", "listen", "--port", str(PORT), "--count", "1", "--backlog", "4",
                  "--pdata", "through the flood")
        cm.wait_for("listening")
        net.wait_link_up()
        flood = net.start("flood", ["python3", os.path.join(HERE, "syn_flood.py"), "--to",
                                    "10.99.%d.2:%d" % (subnet, PORT), "--net", "10.99.%d" % subnet,
                                    "--count", "20000"])
        flood.wait_for("flooding")
        start = time.monotonic()
        cli = c.peer(net, "client", "client", "--to", "10.99.%d.2:%d" % (subnet, PORT), "--rev", "2",
                     "--pdata", "kernel client mid-flood", "--timeout", "10")
        rep = cli.wait_for("reply", timeout=10)
        took = time.monotonic() - start
        print("  connected and answered %.3f s after starting, mid-flood" % took, flush=True)
        check(not rep["reject"] and rep["pdata"] == "through the flood", "reply: %s" % rep)
        check(took < 2.0, "the MPA reply took %.2f s (a dropped SYN costs the kernel 1 s)" % took)
        check(cli.wait_for("closed")["peer_eof"], "client close")
        check(cli.finish() == 0, "client failed")
        done = flood.wait_for("flood_done", timeout=60)
        check(flood.finish() == 0, "flood failed")
        st = expect_exit(cm, 0)
        print("  flood: %d SYNs in %.2f s; CM: %d cookies sent, %d accepted, %d live nodes at exit"
              % (done["sent"], done["seconds"], st["syn_cookies_sent"], st["syn_cookies_accepted"],
                 st["live_nodes"]), flush=True)
        check(st["established"] == 1 and st["accepts"] == 1, "stats: %s" % st)
        # The client's SYN found the backlog full of half-open flood connections.
        check(st["syn_cookies_accepted"] == 1 and st["syn_cookies_sent"] >= 1000, "cookies: %s" % st)
        check(st["live_nodes"] <= 4, "more than the backlog held: %s" % st)


def case_silent_flood(c):
    """1,000 kernel connections that complete the TCP handshake and never send an MPA
    request, then 100 more started each second (silent_flood.py), against `listen` (its
    default backlog of 256, the silent limit with it): three kernel clients connecting one
    after another from the flood's third second on each complete their MPA exchange
    within 1 s, and so does one after the flood. The CM resets the oldest silent
    connections to make room (silent_shed), each reset seen by the flood."""
    subnet = 83
    to = "10.99.%d.2:%d" % (subnet, PORT)
    with Net("silent-flood", subnet) as net:
        cm = c.cm(net, "cm", "listen", "--port", str(PORT), "--count", "4", "--pdata", "past the silent")
        cm.wait_for("listening")
        net.wait_link_up()
        flood = net.start("flood", ["python3", os.path.join(HERE, "silent_flood.py"), "--to", to,
                                    "--hold", "1000", "--rate", "100", "--seconds", "4"])
        held = flood.wait_for("holding", timeout=60)
        flood.wait_for("flooding", timeout=10)
        done = None
        for name in ("client-mid-1", "client-mid-2", "client-mid-3", "client-after"):
            if name == "client-after":
                done = flood.wait_for("silent_done", timeout=60)
                check(flood.finish() == 0, "flood failed")
            cli = c.peer(net, name, "client", "--to", to, "--rev", "2", "--pdata", name, "--timeout", "10")
            rep = cli.wait_for("reply", timeout=10)
            # From the client's connect() to the MPA reply (the interpreter's start left out).
            took = rep["seconds"]
            print("  %s: answered %.3f s after its SYN" % (name, took), flush=True)
            check(not rep["reject"] and rep["pdata"] == "past the silent", "reply: %s" % rep)
            check(took < 1.0, "%s: the MPA reply took %.2f s (a dropped SYN costs the kernel 1 s)" % (name, took))
            check(cli.wait_for("closed")["peer_eof"], "%s close" % name)
            check(cli.finish() == 0, "%s failed" % name)
        st = expect_exit(cm, 0)
        print("  flood: %d opened, %d reset by the CM, %d still open at its end, %d failed; CM: %d shed, "
              "%d cookies, %d live nodes at exit" % (done["opened"], done["reset"], done["open"], done["failed"],
                                                     st["silent_shed"], st["syn_cookies_sent"],
                                                     st["live_nodes"]), flush=True)
        # Every connect got through at once; the CM kept no more silent ones than its limit.
        check(held["started"] == held["opened"] == 1000 and held["failed"] == 0 and held["open"] <= 256 + 8,
              "the flood's first 1,000: %s" % held)
        check(done["opened"] == 1400 and done["failed"] == 0 and done["closed"] == 0, "flood: %s" % done)
        # Every connection beyond the limit was shed with a reset, and the flood saw each.
        check(st["silent_shed"] >= 1400 - 256 and done["reset"] == st["silent_shed"],
              "shed %d, resets seen %d" % (st["silent_shed"], done["reset"]))
        check(done["open"] + done["reset"] == done["opened"], "flood: %s" % done)
        # Each SYN was answered from a node: silent connections never filled the backlog.
        check(st["syn_cookies_sent"] == 0 and st["established"] == 4 and st["accepts"] == 4,
              "stats: %s" % st)


def kernel_neigh(net, addr):
    """The kernel's neighbour entry for addr on br0: (MAC or None, state line)."""
    out = sh("ip", "-o", "neigh", "show", "to", addr, "dev", "br0", ns=net.ns).stdout.strip()
    words = out.split()
    return (words[words.index("lladdr") + 1] if "lladdr" in words else None), out


def mac_change(c, net, family, fast=True):
    """The kernel learns the CM's address with MAC A (one connection), the CM
    restarts with MAC B: returns the seconds from B's start until the kernel's
    entry shows B, and from the kernel client's start until its MPA reply."""
    mac_a, mac_b = "02:00:00:00:a0:01", "02:00:00:00:b0:02"
    addr = "10.99.%d.2" % net.n if family == 4 else "fd99:0:0:%d::2" % net.n
    ip = addr + ("/24" if family == 4 else "/64")
    to = "%s:%d" % (addr, PORT) if family == 4 else "[%s]:%d" % (addr, PORT)
    cm = c.cm(net, "cm-a", "listen", "--port", str(PORT), "--count", "1", "--mac", mac_a, ip=ip)
    cm.wait_for("listening")
    net.wait_link_up()
    cli = c.peer(net, "client-a", "client", "--to", to)
    check(not cli.wait_for("reply")["reject"], "first connection rejected")
    check(cli.finish() == 0, "first client failed")
    expect_exit(cm, 0)
    mac, line = kernel_neigh(net, addr)
    check(mac == mac_a, "the kernel did not learn MAC A: %r" % line)
    print("  kernel entry after the first run: %s" % line, flush=True)
    start = time.monotonic()
    cm = c.cm(net, "cm-b", "listen", "--port", str(PORT), "--count", "1", "--mac", mac_b, ip=ip)
    cm.wait_for("listening")
    learnt, end = None, time.monotonic() + (1.0 if fast else 60)
    while learnt is None and time.monotonic() < end:
        mac, line = kernel_neigh(net, addr)
        if mac == mac_b:
            learnt = time.monotonic() - start
        else:
            time.sleep(0.01)
    if fast:
        check(learnt is not None, "the kernel still holds %r 1 s after the restart" % line)
    print("  kernel entry shows MAC B after %s s: %s" % (learnt and round(learnt, 3), line), flush=True)
    t0 = time.monotonic()
    cli = c.peer(net, "client-b", "client", "--to", to, "--timeout", "5" if fast else "60")
    check(not cli.wait_for("reply", timeout=5 if fast else 70)["reject"], "second connection rejected")
    reached = time.monotonic() - t0
    check(cli.finish() == 0, "second client failed")
    st = expect_exit(cm, 0)
    print("  kernel client reached MAC B in %.3f s; announcements_sent %s"
          % (reached, st.get("announcements_sent")), flush=True)
    if fast:
        check(reached < 1.0, "the kernel client took %.3f s" % reached)
        check(st["announcements_sent"] >= 1, "stats: %s" % st)
    return learnt, reached


def case_announce_mac_change(c):
    """RFC 5227 announcement: a kernel holding the CM's old MAC reaches the new one at once."""
    with Net("announce-mac", 40) as net:
        mac_change(c, net, 4)


def case_announce_mac_change_ipv6(c):
    """RFC 4861 7.2.6 unsolicited override NA: the same for IPv6."""
    with Net("announce-mac6", 41) as net:
        mac_change(c, net, 6)


def routed_peer(net, family):
    """A second namespace behind the case's namespace, which routes: a veth
    pair, 10.98.N.1/24 (fd98:0:0:N::1/64) on the router's side, 10.98.N.2
    (fd98:0:0:N::2) on the peer's with a default route back. Returns the
    peer's namespace and address; the caller removes the namespace."""
    peer_ns = net.ns + "-p"
    sh("ip", "netns", "add", peer_ns)
    n = net.n
    sh("ip", "link", "add", "vr0", "type", "veth", "peer", "name", "vp0", ns=net.ns)
    sh("ip", "link", "set", "vp0", "netns", peer_ns, ns=net.ns)
    sh("ip", "link", "set", "lo", "up", ns=peer_ns)
    if family == 4:
        sh("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=net.ns)
        sh("ip", "addr", "add", "10.98.%d.1/24" % n, "dev", "vr0", ns=net.ns)
        sh("ip", "addr", "add", "10.98.%d.2/24" % n, "dev", "vp0", ns=peer_ns)
    else:
        sh("sysctl", "-qw", "net.ipv6.conf.all.forwarding=1", ns=net.ns)
        sh("ip", "-6", "addr", "add", "fd98:0:0:%d::1/64" % n, "dev", "vr0", "nodad", ns=net.ns)
        sh("ip", "-6", "addr", "add", "fd98:0:0:%d::2/64" % n, "dev", "vp0", "nodad", ns=peer_ns)
    sh("ip", "link", "set", "vr0", "up", ns=net.ns)
    sh("ip", "link", "set", "vp0", "up", ns=peer_ns)
    if family == 4:
        sh("ip", "route", "add", "default", "via", "10.98.%d.1" % n, ns=peer_ns)
        return peer_ns, "10.98.%d.2" % n
    sh("ip", "-6", "route", "add", "default", "via", "fd98:0:0:%d::1" % n, ns=peer_ns)
    return peer_ns, "fd98:0:0:%d::2" % n


def gateway_case(c, name, subnet, family):
    """iwarp-cm connect --gateway to a kernel MPA server in another subnet,
    through the kernel's routing; then a kernel client from there to
    iwarp-cm listen, answered to the MAC its SYN came from (the router's)."""
    with Net(name, subnet) as net:
        peer_ns, peer = routed_peer(net, family)
        try:
            gw = net.kernel4 if family == 4 else net.kernel6
            ip = "10.99.%d.2/24" % subnet if family == 4 else "fd99:0:0:%d::2/64" % subnet
            fmt = "%s:%d" if family == 4 else "[%s]:%d"
            srv = Proc("server", ["python3", PEER, "server", "--bind", fmt % (peer, PORT), "--pdata",
                                  "routed hi", "--close", "wait"], peer_ns)
            net.procs.append(srv)
            srv.wait_for("listening")
            cm = c.cm(net, "cm", "connect", "--gateway", gw, "--to", fmt % (peer, PORT), "--no-p2p",
                      "--hold", "0.2", ip=ip)
            res = cm.wait_for("resolved")
            router_mac = sh("cat", "/sys/class/net/br0/address", ns=net.ns).stdout.strip()
            check(res["gateway"] == gw and res["mac"] == router_mac, "resolved: %s (br0 %s)" % (res, router_mac))
            check(cm.wait_for("established")["pdata"] == "routed hi", "established through the router")
            check(srv.wait_for("closed")["peer_eof"], "server saw no FIN")
            check(srv.finish() == 0, "server failed")
            st = expect_exit(cm, 0)
            check(st["live_nodes"] == 0 and st["established"] == 1, "stats: %s" % st)
            print("  connect through %s: %s ms" % (gw, st.get("connect_ms")), flush=True)
            lst = c.cm(net, "cm-listen", "listen", "--port", str(PORT), "--count", "1", "--gateway", gw,
                       "--pdata", "to the other subnet", ip=ip)
            lst.wait_for("listening")
            net.wait_link_up()
            cli = Proc("client", ["python3", PEER, "client", "--to", fmt % (ip.split("/")[0], PORT)], peer_ns)
            net.procs.append(cli)
            check(cli.wait_for("reply")["pdata"] == "to the other subnet", "reply through the router")
            check(cli.finish() == 0, "client failed")
            expect_exit(lst, 0)
            check(lst.events("connect_request")[0]["remote"].startswith(fmt.split("%")[0] + peer),
                  "request from %s" % lst.events("connect_request")[0]["remote"])
        finally:
            sh("ip", "netns", "del", peer_ns, ok=False)


def case_gateway(c):
    gateway_case(c, "gateway", 44, 4)


def case_gateway_ipv6(c):
    gateway_case(c, "gateway6", 45, 6)


def tos_rows(pcap):
    """Every IPv4 TCP frame of a capture: {src, tos, pcp (None untagged), flags, len}."""
    out = tshark(pcap, "-Y", "ip and tcp", "-T", "fields", "-e", "ip.src", "-e", "ip.dsfield",
                 "-e", "vlan.priority", "-e", "tcp.flags", "-e", "tcp.len")
    rows = []
    for line in out.splitlines():
        src, tos, pcp, flags, length = line.split("\t")
        rows.append({"src": src, "tos": int(tos, 0), "pcp": int(pcp) if pcp else None,
                     "flags": int(flags, 0), "len": int(length)})
    return rows


def check_tos(rows, src, tos, who, pcp=None):
    """Every frame from src carries `tos` (and with a VLAN, `pcp`); returns them."""
    mine = [r for r in rows if r["src"] == src]
    seen = sorted({(hex(r["tos"]), r["pcp"]) for r in mine})
    print("  %s (%s): %d frames, (TOS, PCP) seen %s" % (who, src, len(mine), seen), flush=True)
    check(len(mine) >= 4, "%s: only %d frames from %s" % (who, len(mine), src))
    check(all(r["tos"] == tos for r in mine), "%s: TOS other than %#x: %s" % (who, tos, seen))
    check(pcp is None or all(r["pcp"] == pcp for r in mine),
          "%s: PCP other than %s: %s" % (who, pcp, seen))
    return mine


def case_tos_connect(c):
    """connect --tos 0xb8 to a kernel MPA server: every frame the CM sends (SYN,
    request, RTR, FIN) carries TOS 0xb8; the kernel answers with its own (0).
    Then --vlan 100 both ways (two CMs through the bridge, as in `vlan`): the
    connector's frames carry PCP 5 (DSCP 46 / 8); the listener, at --tos 0x20,
    takes the SYN's larger 0xb8, so its frames carry 0xb8 and PCP 5 too."""
    with Net("tos-connect", 46, taps=("tap0", "tap1")) as net:
        pcap = c.pcap("tos-connect")
        srv = c.peer(net, "server", "server", "--bind", "%s:%d" % (net.kernel4, PORT), "--p2p",
                     "--close", "wait")
        srv.wait_for("listening")
        cm = c.cm(net, "cm", "connect", "--to", "%s:%d" % (net.kernel4, PORT), "--tos", "0xb8",
                  "--hold", "0.2", "--pcap", pcap)
        check(srv.wait_for("rtr")["type"] == "send", "no RTR at the kernel")
        check(srv.finish() == 0, "server failed")
        expect_exit(cm, 0)
        rows = tos_rows(pcap)
        ours = check_tos(rows, "10.99.46.2", 0xb8, "CM")
        check(ours[0]["flags"] == 0x002 and sum(1 for r in ours if r["len"] > 0) == 2,
              "SYN, request, RTR: %s" % ours)
        check_tos(rows, net.kernel4, 0, "kernel")
        # 802.1Q: two CMs, the listener at a smaller TOS.
        pcap = c.pcap("tos-vlan")
        vlan_pair(c, net, pcap, ["--tos", "0x20"], ["--tos", "184"])
        rows = tos_rows(pcap)
        check_tos(rows, "10.99.46.2", 0xb8, "connector", pcp=5)
        check_tos(rows, "10.99.46.3", 0xb8, "listener", pcp=5)


def tos_listen_run(c, net, cm_tos, client_tos, expect, tag):
    """listen --tos cm_tos, a kernel client with IP_TOS client_tos: the CM's
    frames from the SYN-ACK on carry `expect`, the kernel's its own TOS."""
    pcap = c.pcap("tos-listen-" + tag)
    cm = c.cm(net, "cm-" + tag, "listen", "--port", str(PORT), "--count", "1", "--tos", cm_tos,
              "--pcap", pcap)
    cm.wait_for("listening")
    net.wait_link_up()
    cli = c.peer(net, "client-" + tag, "client", "--to", "10.99.%d.2:%d" % (net.n, PORT), "--p2p",
                 "--tos", client_tos)
    check(not cli.wait_for("reply")["reject"], "rejected")
    closed = cli.wait_for("closed")
    check(closed["peer_eof"] and not closed["reset_by_peer"], "client close: %s" % closed)
    check(cli.finish() == 0, "client failed")
    st = expect_exit(cm, 0)
    check(st["established"] == 1 and st["resets_sent"] == 0, "stats: %s" % st)
    rows = tos_rows(pcap)
    ours = check_tos(rows, "10.99.%d.2" % net.n, expect, "CM, listen --tos %s" % cm_tos)
    check(ours[0]["flags"] == 0x012, "the CM's first frame is not its SYN-ACK: %s" % ours[0])
    theirs = check_tos(rows, net.kernel4, int(client_tos, 0), "kernel, IP_TOS %s" % client_tos)
    check(theirs[0]["flags"] == 0x002, "the kernel's first frame is not its SYN: %s" % theirs[0])


def case_tos_listen(c):
    """A passive connection takes the larger of the listener's TOS and the
    SYN's (irdma_make_cm_node): a kernel client at IP_TOS 0x88 against
    listen --tos 0x20 gets 0x88 back; one at 0 against --tos 0xb8 gets 0xb8."""
    with Net("tos-listen", 47) as net:
        tos_listen_run(c, net, "0x20", "0x88", 0x88, "a")
        tos_listen_run(c, net, "0xb8", "0", 0xb8, "b")


def rtr_stag_zero_run(c, net, kind):
    """A kernel initiator offers only the `kind` RTR (RFC 6581 C or D bit),
    then sends it with STag 0 and a nonzero tagged offset, CRC off."""
    other = "read" if kind == "write" else "write"
    pcap = c.pcap("rtr-" + kind)
    cm = c.cm(net, "cm-" + kind, "listen", "--port", str(PORT), "--count", "1",
              "--pdata", "rtr " + kind, "--pcap", pcap)
    cm.wait_for("listening")
    net.wait_link_up()
    cli = c.peer(net, "client-" + kind, "client", "--to", "10.99.%d.2:%d" % (net.n, PORT), "--p2p",
                 "--rtr", kind, "--rtr-stag", "0", "--rtr-to", "0x0123456789abcdef")
    rep = cli.wait_for("reply")
    check(rep["p2p"] and rep["rtr_" + kind] and not rep["rtr_send"] and not rep["rtr_" + other]
          and not rep["crc"], "reply: %s" % rep)
    sent = cli.wait_for("rtr_sent")
    check(sent["type"] == kind and sent["stag"] == 0 and not sent["crc"], "rtr_sent: %s" % sent)
    if kind == "read":
        # A READ RTR is a Read Request: the CM answers it, to the sink the RTR named.
        resp = cli.wait_for("rtr_read_response")
        check(resp["stag"] == 0 and resp["to"] == "0x123456789abcdef", "RTR's answer: %s" % resp)
    # Any byte from the CM before its FIN (a TERMINATE) makes peer_eof false.
    closed = cli.wait_for("closed")
    check(closed["peer_eof"] and not closed["reset_by_peer"], "client close: %s" % closed)
    check(cli.finish() == 0, "client failed")
    st = expect_exit(cm, 0)
    req = cm.events("connect_request")[0]
    check(req["p2p"] and req["rtr_offered"] == [kind], "request: %s" % req)
    est = cm.events("established")
    check(len(est) == 1 and est[0]["rtr"] == kind and est[0]["crc"] is False,
          "established: %s" % est)
    check(cm.events("disconnected")[0]["status"] == 0, "disconnect: %s" % cm.events("disconnected"))
    check(st["established"] == 1 and st["resets_sent"] == 0 and st["resets_received"] == 0
          and st["live_nodes"] == 0, "stats: %s" % st)
    # The capture: the RTR as tshark reads it, and no payload from the CM but its reply.
    check_capture(pcap, net)
    fields = ("iwarp_ddp.stag", "iwarp_ddp.tagged_offset") if kind == "write" else \
        ("iwarp_rdma.sinkstag", "iwarp_rdma.sinkto", "iwarp_rdma.srcstag", "iwarp_rdma.srcto")
    args = ["-Y", "iwarp_mpa.fpdu", "-T", "fields", "-e", "iwarp_rdma.opcode"]
    for f in fields:
        args += ["-e", f]
    rows = [l.split("\t") for l in tshark(pcap, *args).splitlines()]
    rtr = [r for r in rows if int(r[0], 0) != 2]
    print("  %s RTR in the capture (opcode, STag, offset...): %s" % (kind, rtr), flush=True)
    check(len(rtr) == 1 and int(rtr[0][0], 0) == (0 if kind == "write" else 1),
          "RTR FPDU: %s" % rtr)
    stags, offsets = rtr[0][1::2], rtr[0][2::2]
    check(all(int(v, 0) == 0 for v in stags) and all(int(v, 0) == 0x0123456789abcdef for v in offsets),
          "STag / offset: %s" % rtr)
    # The CM's payloads: its reply, and for a READ RTR the zero-length Read Response.
    answers = [r for r in rows if int(r[0], 0) == 2]
    check(len(answers) == (kind == "read"), "Read Responses: %s" % answers)
    ours = [r for r in tos_rows(pcap) if r["src"] == "10.99.%d.2" % net.n]
    check(sum(1 for r in ours if r["len"] > 0) == 1 + (kind == "read") and not any(r["flags"] & 0x004 for r in ours),
          "the CM sent more than its reply (and the READ RTR's answer), or a reset: %s" % ours)


def case_rtr_stag_zero(c):
    """Lenient RTR (RFC 6581 asks no check of the STag): a kernel client's
    zero-length RDMA WRITE, then READ RTR with STag 0 and tagged offset
    0x0123456789abcdef establishes; no TERMINATE, no reset. The READ RTR is
    answered with a zero-length Read Response to that sink."""
    with Net("rtr-stag-zero", 48) as net:
        rtr_stag_zero_run(c, net, "write")
        rtr_stag_zero_run(c, net, "read")


# ---------------------------------------------------------------- byte streams

# 100 MB each way, both at once (issue "A whole TCP"); 20 MB each way under 5 %
# loss in both directions: there about 1 MB/s each way (the CM's sender has no
# SACK, so a retransmission lost during recovery waits for the RTO), some 20 s
# per direction of connection, each with thousands of segments dropped.
# IWCM_STREAM_LOSS_BYTES sets another amount.
STREAM_BYTES = 100 * 1000 * 1000
LOSS_BYTES = int(os.environ.get("IWCM_STREAM_LOSS_BYTES", 20 * 1000 * 1000))
LOSS_PERCENT = 5


def pattern_sha256(tag, n):
    """hashlib's SHA-256 of the first n bytes of a direction's pattern."""
    h = hashlib.sha256()
    for off in range(0, n, mpa_peer.CHUNK):
        h.update(mpa_peer.pattern_bytes(tag, off, min(mpa_peer.CHUNK, n - off)))
    return h.hexdigest()


def tcp_counters(net):
    """The namespace kernel's TCP counters of /proc/net/snmp (OutRsts, EstabResets...)."""
    snmp = sh("cat", "/proc/net/snmp", ns=net.ns).stdout.splitlines()
    lines = [l.split() for l in snmp if l.startswith("Tcp:")]
    return dict(zip(lines[0][1:], (int(v) for v in lines[1][1:])))


def nft_loss(net, percent):
    """Drops `percent` % of the kernel's TCP segments to the CM (output) and
    of the CM's to the kernel (input), at random, with counters. The output
    hook sees what TCP hands down before GSO cuts it into segments, so the
    bridge is told to take one segment per packet (gso_max_segs 1): a drop
    is one segment, not up to 64 KB of them."""
    sh("ip", "link", "set", "br0", "gso_max_segs", "1", ns=net.ns)
    cm = "10.99.%d.2" % net.n
    rules = ("add table inet iwcm_loss\n"
             "add chain inet iwcm_loss out { type filter hook output priority 0; policy accept; }\n"
             "add chain inet iwcm_loss in { type filter hook input priority 0; policy accept; }\n"
             "add rule inet iwcm_loss out ip daddr %s meta l4proto tcp numgen random mod 100 < %d counter drop\n"
             "add rule inet iwcm_loss in ip saddr %s meta l4proto tcp numgen random mod 100 < %d counter drop\n"
             % (cm, percent, cm, percent))
    r = subprocess.run(["ip", "netns", "exec", net.ns, "nft", "-f", "-"], input=rules, text=True,
                       capture_output=True, timeout=30)
    check(r.returncode == 0, "nft failed (nftables needed): %s" % r.stderr)


def nft_drops(net):
    """Packets the loss rules dropped: (toward the CM, from the CM)."""
    out = sh("nft", "list", "table", "inet", "iwcm_loss", ns=net.ns).stdout
    counts = [int(l.split("packets")[1].split()[0]) for l in out.splitlines() if "counter packets" in l]
    check(len(counts) == 2, "nft counters: %s" % out)
    return counts[0], counts[1]


def kernel_end(proc, n, cm_tag, limit):
    """The kernel peer's side: its `stream` line says n bytes went each way
    and that what it read is the CM's pattern (its SHA-256 too), then it
    sees a clean EOF (no byte more, no reset) and exits 0. Returns the line."""
    line = proc.wait_for("stream", timeout=limit + 30)
    check(line["sent"] == n and line["send_error"] is None and line["recv_error"] is None,
          "%s stream: %s" % (proc.name, line))
    check(line["received"] == n and line["verified"] and line["received_sha256"] == pattern_sha256(cm_tag, n),
          "%s did not read the CM's %d bytes: %s" % (proc.name, n, line))
    closed = proc.wait_for("closed", timeout=30)
    check(closed["peer_eof"] and not closed["reset_by_peer"], "%s's end: %s" % (proc.name, closed))
    check(proc.finish() == 0, "%s failed" % proc.name)
    return line


def check_transfer(cm, n, want_sha, peer_line):
    """The CM's `transfer` line: n bytes each way, verified, the hash of the
    peer's pattern and the same hash the peer computed over what it sent."""
    t = cm.events("transfer")
    check(len(t) == 1, "expected one transfer line, got %s" % t)
    t = t[0]
    check(t["bytes_sent"] == n and t["bytes_received"] == n and t["bytes_expected"] == n,
          "transfer counts: %s" % t)
    check(t["verified"] is True and t["error"] is None, "transfer not verified: %s" % t)
    check(t["sha256"] == want_sha and t["sha256"] == peer_line["sent_sha256"],
          "transfer hash %s, pattern %s, peer sent %s" % (t["sha256"], want_sha, peer_line["sent_sha256"]))
    return t


def check_no_reset(net, st, before):
    """No reset either way, without a capture: the CM's counters and the
    namespace kernel's (OutRsts: resets it sent; EstabResets: connections a
    reset ended)."""
    after = tcp_counters(net)
    sent = after["OutRsts"] - before["OutRsts"]
    ended = after["EstabResets"] - before["EstabResets"]
    check(st["resets_sent"] == 0 and st["resets_received"] == 0, "CM resets: %s" % st)
    check(sent == 0 and ended == 0, "kernel: OutRsts +%d, EstabResets +%d" % (sent, ended))


def report_rate(what, t, peer_line, took):
    print("  %s: %d bytes each way in %.1f s (case %.1f s); CM send %.1f MB/s, recv %.1f MB/s; "
          "kernel send %.1f MB/s, recv %.1f MB/s; CM retransmitted %d segments"
          % (what, t["bytes_sent"], t["seconds"], took, t["send_mbyte_s"], t["recv_mbyte_s"],
             peer_line["send_mbyte_s"], peer_line["recv_mbyte_s"], t["retransmitted_segments"]), flush=True)


def check_end(cm, cm_first):
    """The CM's one disconnected line: a FIN (status 0), in TIME_WAIT when the
    CM closed first, in CLOSE_WAIT when the kernel did."""
    disc = cm.events("disconnected")
    state = "TIME_WAIT" if cm_first else "CLOSE_WAIT"
    check(len(disc) == 1 and disc[0]["status"] == 0 and disc[0]["state"] == state,
          "the CM's end (%s closes first: %s): %s" % ("the CM" if cm_first else "the kernel", state, disc))


def stream_connect(c, net, n, limit, cm_first=True):
    """iwarp-cm connect to a kernel server: n bytes each way at once, then
    the CM closes (its FIN after the data) and the kernel after the CM's EOF;
    or (cm_first False) the kernel closes first while the CM holds. Returns
    the CM's transfer line."""
    start = time.monotonic()
    before = tcp_counters(net)
    srv = c.peer(net, "server", "server", "--bind", "%s:%d" % (net.kernel4, PORT), "--p2p", "--close",
                 "wait" if cm_first else "graceful", "--send-bytes", str(n), "--expect-bytes", str(n),
                 "--timeout", str(limit))
    srv.wait_for("listening")
    cm = c.cm(net, "cm", "connect", "--to", "%s:%d" % (net.kernel4, PORT), "--send-bytes", str(n),
              "--expect-bytes", str(n), "--data-timeout", str(limit), "--hold", "0" if cm_first else "30")
    line = kernel_end(srv, n, mpa_peer.TAG_INITIATOR, limit)
    st = expect_exit(cm, 0, timeout=60)
    t = check_transfer(cm, n, pattern_sha256(mpa_peer.TAG_RESPONDER, n), line)
    check(len(cm.events("close_sent")) == (1 if cm_first else 0) and not cm.events("abort_sent"),
          "close_sent / abort_sent: %s %s" % (cm.events("close_sent"), cm.events("abort_sent")))
    check_end(cm, cm_first)
    check(st["live_nodes"] == 0, "stats: %s" % st)
    check_no_reset(net, st, before)
    report_rate("connect", t, line, time.monotonic() - start)
    return t


def stream_listen(c, net, n, limit, cm_first=False):
    """A kernel client to iwarp-cm listen: n bytes each way at once, then the
    kernel closes first (its FIN after the data) and the CM's FIN follows; or
    (cm_first, listen --close-after-data) the CM closes once the bytes are
    through and the kernel after the CM's EOF."""
    start = time.monotonic()
    before = tcp_counters(net)
    cm = c.cm(net, "cm", "listen", "--port", str(PORT), "--count", "1", "--send-bytes", str(n),
              "--expect-bytes", str(n), "--data-timeout", str(limit),
              *(["--close-after-data"] if cm_first else []))
    cm.wait_for("listening")
    net.wait_link_up()
    cli = c.peer(net, "client", "client", "--to", "10.99.%d.2:%d" % (net.n, PORT), "--p2p", "--close",
                 "wait" if cm_first else "graceful", "--send-bytes", str(n), "--expect-bytes", str(n),
                 "--timeout", str(limit))
    line = kernel_end(cli, n, mpa_peer.TAG_RESPONDER, limit)
    st = expect_exit(cm, 0, timeout=60)
    t = check_transfer(cm, n, pattern_sha256(mpa_peer.TAG_INITIATOR, n), line)
    check_end(cm, cm_first)
    check(st["live_nodes"] == 0 and st["established"] == 1, "stats: %s" % st)
    check_no_reset(net, st, before)
    report_rate("listen", t, line, time.monotonic() - start)
    return t


def tcp_ext(net):
    """The namespace kernel's TcpExt counters of /proc/net/netstat (TCPKeepAlive, ...)."""
    rows = [l.split() for l in sh("cat", "/proc/net/netstat", ns=net.ns).stdout.splitlines()
            if l.startswith("TcpExt:")]
    return dict(zip(rows[0][1:], (int(v) for v in rows[1][1:])))


def case_stream_keepalive(c):
    """After the hand-off the kernel server probes the idle stream with its keepalive
    (TCP_KEEPIDLE 1 s, TCP_KEEPINTVL 1 s, TCP_KEEPCNT 3) while the CM holds 8 s: the CM
    must answer every probe, or the kernel gives the connection up after 4 s (ETIMEDOUT,
    a reset). The kernel counts its probes (TcpExt TCPKeepAlive): at least 5 in 8 s."""
    n = 65536
    with Net("stream-keepalive", 56) as net:
        before, ext_before = tcp_counters(net), tcp_ext(net)
        srv = c.peer(net, "server", "server", "--bind", "%s:%d" % (net.kernel4, PORT), "--p2p", "--close",
                     "wait", "--send-bytes", str(n), "--expect-bytes", str(n), "--timeout", "60",
                     "--keepalive", "1,1,3")
        srv.wait_for("listening")
        cm = c.cm(net, "cm", "connect", "--to", "%s:%d" % (net.kernel4, PORT), "--send-bytes", str(n),
                  "--expect-bytes", str(n), "--hold", "8")
        line = kernel_end(srv, n, mpa_peer.TAG_INITIATOR, 60)
        st = expect_exit(cm, 0, timeout=60)
        check_transfer(cm, n, pattern_sha256(mpa_peer.TAG_RESPONDER, n), line)
        check_end(cm, True)
        check_no_reset(net, st, before)
        probes = tcp_ext(net)["TCPKeepAlive"] - ext_before["TCPKeepAlive"]
        print("  kernel keepalive probes: %d" % probes, flush=True)
        check(probes >= 5, "the kernel sent %d keepalive probes in 8 s idle" % probes)


def case_stream_zero_window(c):
    """After the hand-off the CM sends 16 MB to a kernel server that starts reading only
    after 3 s: its receive buffer fills and it advertises a zero window (TcpExt
    TCPToZeroWindowAdv); the CM must probe it, wait without giving up, and send the rest
    once the reader drains it, every byte checked, no reset either way."""
    n = 16 * 1024 * 1024
    with Net("stream-zero-window", 57) as net:
        before, ext_before = tcp_counters(net), tcp_ext(net)
        srv = c.peer(net, "server", "server", "--bind", "%s:%d" % (net.kernel4, PORT), "--p2p", "--close",
                     "wait", "--expect-bytes", str(n), "--read-pause", "3", "--timeout", "60")
        srv.wait_for("listening")
        cm = c.cm(net, "cm", "connect", "--to", "%s:%d" % (net.kernel4, PORT), "--send-bytes", str(n),
                  "--data-timeout", "60", "--hold", "0")
        line = srv.wait_for("stream", timeout=90)
        check(line["received"] == n and line["verified"] and line["recv_error"] is None,
              "the kernel did not read the CM's %d bytes: %s" % (n, line))
        check(line["received_sha256"] == pattern_sha256(mpa_peer.TAG_INITIATOR, n), "sha256: %s" % line)
        closed = srv.wait_for("closed", timeout=30)
        check(closed["peer_eof"] and not closed["reset_by_peer"], "the kernel's end: %s" % closed)
        check(srv.finish() == 0, "the kernel peer failed")
        st = expect_exit(cm, 0, timeout=60)
        check_no_reset(net, st, before)
        zero = tcp_ext(net)["TCPToZeroWindowAdv"] - ext_before["TCPToZeroWindowAdv"]
        print("  kernel zero-window advertisements: %d" % zero, flush=True)
        check(zero >= 1, "the kernel never advertised a zero window")


def case_stream_connect(c):
    """100 MB each way between iwarp-cm connect and a kernel socket server,
    checksummed at both ends; the CM closes after the data."""
    with Net("stream-connect", 50) as net:
        stream_connect(c, net, STREAM_BYTES, 300)


def tap_counters(net, tap="tap0"):
    """The TAP's counts as its kernel keeps them: rx what the CM wrote, tx what it read."""
    d = "/sys/class/net/%s/statistics/" % tap
    return {k: int(sh("cat", d + k, ns=net.ns).stdout)
            for k in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes")}


def case_stream_tap_offload(c):
    """8 MB each way between iwarp-cm (connect, then listen) and a kernel socket over the
    TAP with its virtio-net header, the default: byte-exact at both ends as in stream_connect
    and stream_listen, and the frames the CM wrote and read were longer than an Ethernet
    frame on average, so its segments left as GSO frames the kernel's TCP took, and the
    kernel's reached it as the large segments its TSO made."""
    with Net("stream-tap-offload", 52) as net:
        for run in (stream_connect, stream_listen):
            before = tap_counters(net)
            run(c, net, 8 * 1000 * 1000, 120)
            after = tap_counters(net)
            d = {k: after[k] - before[k] for k in after}
            wrote = d["rx_bytes"] / max(d["rx_packets"], 1)
            read = d["tx_bytes"] / max(d["tx_packets"], 1)
            print("  %s: the CM wrote %d frames of %.0f bytes on average, read %d of %.0f"
                  % (run.__name__, d["rx_packets"], wrote, d["tx_packets"], read), flush=True)
            check(wrote > 1514 and read > 1514,
                  "%s: frames of %.0f and %.0f bytes on average: no larger than an Ethernet frame"
                  % (run.__name__, wrote, read))


def case_stream_listen(c):
    """100 MB each way between a kernel socket client and iwarp-cm listen,
    checksummed at both ends; the kernel closes first after the data."""
    with Net("stream-listen", 51) as net:
        stream_listen(c, net, STREAM_BYTES, 300)


def case_stream_close_sides(c):
    """10 MB each way, the other closer on each side: listen
    --close-after-data closes first (the kernel client waits for its EOF),
    and connect --hold 30 sees the kernel server close first."""
    with Net("stream-close-sides", 54) as net:
        stream_listen(c, net, 10 * 1000 * 1000, 60, cm_first=True)
        stream_connect(c, net, 10 * 1000 * 1000, 60, cm_first=False)


def case_stream_loss(c):
    """As stream_connect and stream_listen, with 5 % of the segments dropped
    at random in each direction by nftables on the kernel's side: both the
    CM and the kernel retransmit, every byte still arrives exactly once."""
    with Net("stream-loss", 52) as net:
        nft_loss(net, LOSS_PERCENT)
        for run in (stream_connect, stream_listen):
            to_cm, from_cm = nft_drops(net)
            t = run(c, net, LOSS_BYTES, 600)
            to_cm2, from_cm2 = nft_drops(net)
            print("  nft dropped %d segments toward the CM, %d from it"
                  % (to_cm2 - to_cm, from_cm2 - from_cm), flush=True)
            check(to_cm2 > to_cm and from_cm2 > from_cm, "nft dropped nothing in one direction")
            check(t["retransmitted_segments"] > 0, "the CM retransmitted nothing: %s" % t)


def case_stream_corrupt(c):
    """A kernel server sends 1 MB of its pattern with byte 123457 flipped:
    iwarp-cm connect names that byte, resets the connection and exits 6."""
    n, bad = 1000 * 1000, 123457
    with Net("stream-corrupt", 53) as net:
        srv = c.peer(net, "server", "server", "--bind", "%s:%d" % (net.kernel4, PORT), "--p2p", "--close",
                     "wait", "--send-bytes", str(n), "--corrupt-at", str(bad))
        srv.wait_for("listening")
        cm = c.cm(net, "cm", "connect", "--to", "%s:%d" % (net.kernel4, PORT), "--expect-bytes", str(n))
        line = srv.wait_for("stream")
        closed = srv.wait_for("closed")
        check(closed["reset_by_peer"] or "ConnectionResetError" in (line["send_error"] or ""),
              "the kernel saw no reset: %s %s" % (line, closed))
        check(srv.finish() == 0, "server failed")
        st = expect_exit(cm, 6)
        want = "byte %d from %s:%d is not the pattern's" % (bad, net.kernel4, PORT)
        check(want in cm.stderr, "reason: %r" % cm.stderr)
        t = cm.events("transfer")
        check(len(t) == 1 and t[0]["verified"] is False and want in t[0]["error"], "transfer: %s" % t)
        check(len(cm.events("abort_sent")) == 1 and st["resets_sent"] >= 1, "no reset: %s" % st)


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def main(cases=None, doc=None):
    """Runs one case of `cases` (this file's by default; rping_test.py passes its own)."""
    cases = cases or CASES
    p = argparse.ArgumentParser(description=doc or __doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True)
    p.add_argument("--tmp", default="/tmp")
    p.add_argument("case", choices=sorted(cases))
    a = p.parse_args()
    if os.geteuid() != 0:
        print("FAIL: the interop tests need root (network namespaces, TAP devices)")
        return 1
    start = time.monotonic()
    try:
        cases[a.case](Case(a))
    except Failure as e:
        print("FAIL %s: %s" % (a.case, e), flush=True)
        return 1
    print("PASS %s (%.1f s)" % (a.case, time.monotonic() - start), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
