#!/usr/bin/env python3
"""Network namespaces for two RDMA programs run by `iwarp-cm run`, and the
programs in them (docs/applications.md).

Read first: docs/applications.md, tools/run.cpp.

Two layouts, each a context manager that removes what it made on exit, also
after an exception, Ctrl-C (KeyboardInterrupt) or SIGTERM (turned into
Interrupted so that the same exit runs), and first kills every program it
started, by process ID, then anything else still running in its namespaces
(which fails a case that had not failed already: a leak):

  TapBridge(subnet)  one namespace; a bridge br0 with the TAP devices iwcm-a
                     and iwcm-b on it (TAP mode: each program opens its own);
                     the programs' addresses are 10.97.N.1/24 (iwcm-a) and
                     10.97.N.2/24 (iwcm-b), held by the programs, not by the
                     kernel. The kernel has 10.97.N.254/24 on br0, from which
                     wait_listening() probes a server.
  VethPair(subnet)   two namespaces joined by a veth pair a0 / b0 with the
                     kernel's addresses 10.96.N.1/24 and 10.96.N.2/24, which
                     the programs share with it (`--dev`).

Each has `sides`: for side 0 and side 1, the namespace, the `iwarp-cm run`
options and the program's address. Nothing leaves the namespaces.

As a module: `with TapBridge(1) as net: net.start(...)`. From a shell, for
trying things by hand: `netns.py tap|veth [SUBNET]` makes the layout, prints
the commands that run a program on each side, and removes it all on Ctrl-C.
"""
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "interop"))
import interop_test  # noqa: E402  (Namespaces: made on entry, removed on exit)
from interop_test import Failure, check, sh  # noqa: E402

TAPS = ("iwcm-a", "iwcm-b")
VETHS = ("a0", "b0")
# The kernel's address on the TAP layout's bridge, for probes only.
PROBE_HOST = 254


class Interrupted(Exception):
    """SIGTERM to the test: leave through the same cleanup as an error."""


def children(pid):
    """The process IDs whose parent is pid (its threads' children lists)."""
    out = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                out += [int(c) for c in f.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


class Program:
    """One command started in a namespace in a session of its own (its process
    group is its own PID), its stdout and stderr going to a file."""

    def __init__(self, name, argv, ns, log_dir):
        self.name = name
        self.argv = list(argv)
        self.log = os.path.join(log_dir, "%s.log" % name)
        self._out = open(self.log, "w+")
        self.p = subprocess.Popen(["ip", "netns", "exec", ns] + self.argv, stdin=subprocess.DEVNULL,
                                  stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True)
        print("  start %s (pid %d) in %s: %s" % (name, self.p.pid, ns, " ".join(self.argv)), flush=True)

    def output(self):
        self._out.flush()
        with open(self.log, errors="replace") as f:
            return f.read()

    def running(self):
        return self.p.poll() is None

    def wait(self, deadline):
        """The exit code, or None if still running at `deadline` (monotonic)."""
        try:
            return self.p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return None

    def signal(self, sig):
        if self.running():
            os.kill(self.p.pid, sig)

    def kill(self, grace=2.0):
        """SIGTERM (which `iwarp-cm run` passes on to its program), then
        SIGKILL to the program, the wrapper and their process group."""
        if not self.running():
            return
        self.signal(signal.SIGTERM)
        if self.wait(time.monotonic() + grace) is not None:
            return
        for pid in children(self.p.pid) + [self.p.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait()


class Layout(interop_test.Namespaces):
    """Namespaces made on entry and removed on exit (interop_test.Namespaces),
    with the programs started in them killed first; SIGTERM leaves the same way."""

    def __init__(self, namespaces, log_dir):
        super().__init__(namespaces)
        self.log_dir = log_dir
        self._old_term = None

    def __enter__(self):
        self._old_term = signal.signal(signal.SIGTERM, self._on_term)
        try:
            return super().__enter__()
        except BaseException:
            signal.signal(signal.SIGTERM, self._old_term)
            raise

    @staticmethod
    def _on_term(signo, frame):
        raise Interrupted("SIGTERM")

    def __exit__(self, *exc):
        left = []
        try:
            for p in self.procs:
                p.kill()
            left = self.reap()
            super().__exit__(*exc)
        finally:
            signal.signal(signal.SIGTERM, self._old_term)
        # Whatever a program started and left running (a switch that did not
        # end with its last client, say) is a leak; an earlier failure says more.
        check(not left or exc[0] is not None,
              "left running in the namespaces after the programs ended (now killed): %s" % left)

    def reap(self, timeout=3.0):
        """Until no process is left in the namespaces, for at most `timeout`;
        then those left are killed. Returns them as "pid command" strings."""
        end = time.monotonic() + timeout
        while True:
            pids = [int(p) for ns in self.names for p in sh("ip", "netns", "pids", ns, ok=False).stdout.split()]
            if not pids or time.monotonic() > end:
                break
            time.sleep(0.05)
        left = []
        for pid in pids:
            try:
                with open("/proc/%d/cmdline" % pid) as f:
                    left.append("%d %s" % (pid, f.read().replace("\0", " ").strip()))
                os.kill(pid, signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError):
                pass
        return left

    def start(self, name, side, argv):
        p = Program(name, argv, self.sides[side]["ns"], self.log_dir)
        self.procs.append(p)
        return p

    def wait_carrier(self, ns, devs, timeout=10):
        end = time.monotonic() + timeout
        while True:
            out = sh("ip", "-o", "link", "show", ns=ns).stdout
            lines = {l.split(":")[1].strip().split("@")[0]: l for l in out.splitlines()}
            if all(d in lines and "LOWER_UP" in lines[d] for d in devs):
                return
            if time.monotonic() > end:
                raise Failure("%s: no carrier on %s after %.0f s:\n%s" % (ns, devs, timeout, out))
            time.sleep(0.05)


class TapBridge(Layout):
    def __init__(self, subnet, log_dir="/tmp"):
        self.ns = "iwcm-progs-%d-%d" % (subnet, os.getpid())
        super().__init__([self.ns], log_dir)
        self.prefix = "10.97.%d." % subnet
        self.sides = [{"ns": self.ns, "addr": self.prefix + str(i + 1),
                       "run": ["--tap", TAPS[i], "--ip", "%s%d/24" % (self.prefix, i + 1)]}
                      for i in range(2)]

    def build(self):
        ns = self.ns
        sh("ip", "link", "set", "lo", "up", ns=ns)
        sh("ip", "link", "add", "br0", "type", "bridge", "mcast_snooping", "0", "forward_delay", "0", ns=ns)
        sh("ip", "addr", "add", "%s%d/24" % (self.prefix, PROBE_HOST), "dev", "br0", ns=ns)
        sh("ip", "link", "set", "br0", "up", ns=ns)
        for tap in TAPS:
            sh("ip", "tuntap", "add", "dev", tap, "mode", "tap", ns=ns)
            sh("ip", "link", "set", tap, "master", "br0", "up", ns=ns)

    def probe_side(self, server_side):
        return self.ns


class VethPair(Layout):
    def __init__(self, subnet, log_dir="/tmp"):
        tag = "%d-%d" % (subnet, os.getpid())
        super().__init__(["iwcm-pa-" + tag, "iwcm-pb-" + tag], log_dir)
        self.prefix = "10.96.%d." % subnet
        self.sides = [{"ns": self.names[i], "addr": self.prefix + str(i + 1), "dev": VETHS[i],
                       "run": ["--dev", VETHS[i]]} for i in range(2)]

    def build(self):
        a, b = self.sides
        sh("ip", "link", "add", a["dev"], "netns", a["ns"], "type", "veth", "peer", "name", b["dev"],
           "netns", b["ns"])
        for s in self.sides:
            sh("ip", "link", "set", "lo", "up", ns=s["ns"])
            sh("ip", "addr", "add", s["addr"] + "/24", "dev", s["dev"], ns=s["ns"])
            sh("ip", "link", "set", s["dev"], "up", ns=s["ns"])
            # A veth leaves the TCP checksum of what the kernel sends to the
            # "hardware"; an AF_XDP socket on the other end takes the frame as
            # it is (tests/interop/shared_test.py), so the kernel fills it in.
            sh("ethtool", "-K", s["dev"], "tx", "off", ns=s["ns"])
        for s in self.sides:
            self.wait_carrier(s["ns"], [s["dev"]])

    def probe_side(self, server_side):
        # The kernel beside the other program (started after the probe).
        return self.sides[1 - server_side]["ns"]


PROBE = """
import socket, struct, sys
s = socket.socket()
s.settimeout(float(sys.argv[3]))
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
except ConnectionRefusedError:
    print("refused")
except OSError as e:
    print("error %s" % e)
else:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    print("listening")
s.close()
"""


def wait_listening(net, server, side, port, deadline):
    """Until a TCP handshake with the server's address and port completes
    (the program listens), probing from a kernel of the layout; the probe
    ends its connection with a reset, before any MPA request, so the
    program's connection manager drops it without telling the program.
    Fails if the server exits first or `deadline` passes."""
    addr = net.sides[side]["addr"]
    ns = net.probe_side(side)
    last = ""
    while time.monotonic() < deadline:
        check(server.running(), "%s exited (%s) before listening on %s:%d:\n%s" %
              (server.name, server.p.returncode, addr, port, server.output()))
        r = sh(sys.executable, "-c", PROBE, addr, str(port), "0.5", ns=ns, ok=False)
        last = (r.stdout + r.stderr).strip()
        if last == "listening":
            return
        time.sleep(0.05)
    raise Failure("%s: not listening on %s:%d in time (last probe: %s):\n%s" %
                  (server.name, addr, port, last, server.output()))


def main():
    kind = sys.argv[1] if len(sys.argv) > 1 else ""
    if kind not in ("tap", "veth"):
        print("usage: netns.py tap|veth [SUBNET]", file=sys.stderr)
        return 2
    subnet = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    try:
        with (TapBridge if kind == "tap" else VethPair)(subnet) as net:
            for i, s in enumerate(net.sides):
                print("side %d: ip netns exec %s iwarp-cm run %s -- PROGRAM   (address %s)" %
                      (i, s["ns"], " ".join(s["run"]), s["addr"]))
            print("Ctrl-C removes it all.", flush=True)
            try:
                threading.Event().wait()
            except (KeyboardInterrupt, Interrupted):
                pass
    except Failure as e:  # what was still running there, killed
        print(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
