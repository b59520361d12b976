#!/usr/bin/env python3
"""Debian 12's own RDMA programs, unmodified, over iwarp-cm at both ends:
each end is `iwarp-cm run ... -- PROGRAM`, which preloads libiwcm_rdma.so
(docs/applications.md).

Read first: netns.py (the namespaces and the programs in them), tools/run.cpp,
the programs' man pages (rping(1), ucmatose(1), cmtime(1), rdma_server(1),
rdma_client(1)) and perftest's --help.

  programs_test.py --bin build/bin/iwarp-cm MODE CASE

MODE tap: both programs in one namespace, each on its own TAP device on a
bridge (server 10.97.N.1, client 10.97.N.2). MODE dev: the server and the
client in two namespaces joined by a veth pair, each sharing its end's
address with the kernel (`--dev`; server 10.96.N.1, client 10.96.N.2).

The server starts first; the client starts once a TCP handshake with the
server's port completes (netns.wait_listening). Each program must exit 0
with its normal output (the lines each case names); a case has LIMIT seconds,
after which both programs are killed and the case fails with their output.
Needs root (namespaces, TAP devices, AF_XDP).
"""
import argparse
import json
import os
import re
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from netns import Failure, Interrupted, TapBridge, VethPair, check, sh, wait_listening  # noqa: E402

LIMIT = 45  # seconds for a case's programs, from the server's start to the last exit
SERVER, CLIENT = 0, 1
RPING_PORT = 7174  # rping's default
CM_PORT = 7471  # ucmatose's, cmtime's, rdma_server's default
PERF_PORT = 18515  # perftest's default
CMATOSE_PEER = os.path.join(os.path.dirname(HERE), "interop", "cmatose_peer.py")


class Pair:
    """A server and a client program over `iwarp-cm run` in one layout."""

    def __init__(self, c, net):
        self.c = c
        self.net = net
        self.deadline = time.monotonic() + LIMIT
        self.server = None
        self.client = None

    def start(self, name, side, argv, run_opts=()):
        # stdbuf: line-buffered output, so that a program killed at the time
        # limit has shown how far it got (the program itself is unchanged).
        return self.net.start(name, side, [self.c.bin, "run"] + self.net.sides[side]["run"] + list(run_opts) +
                              ["--", "stdbuf", "-oL", "-eL"] + argv)

    def run(self, port, server_argv, client_argv, run_opts=(), server_stays=False):
        """Starts both, waits for both (or, with server_stays, for the client
        while the server keeps serving, then stops the server with SIGTERM).
        Returns (server output, client output)."""
        self.server = self.start("server", SERVER, server_argv, run_opts)
        wait_listening(self.net, self.server, SERVER, port, self.deadline)
        self.client = self.start("client", CLIENT, client_argv, run_opts)
        self.expect_exit(self.client, 0)
        if server_stays:
            check(self.server.running(), "the server exited (%s) when the client ended:\n%s" %
                  (self.server.p.returncode, self.outputs()))
            self.server.signal(signal.SIGTERM)
            self.expect_exit(self.server, 128 + signal.SIGTERM)
        else:
            self.expect_exit(self.server, 0)
        return self.server.output(), self.client.output()

    def expect_exit(self, prog, code):
        rc = prog.wait(self.deadline)
        if rc is None:
            for p in (self.server, self.client):
                if p is not None:
                    p.kill()
            raise Failure("%s still running after %d s; both killed:\n%s" % (prog.name, LIMIT, self.outputs()))
        check(rc == code, "%s: exit %d, expected %d:\n%s" % (prog.name, rc, code, self.outputs()))

    def outputs(self):
        return "\n".join("---- %s (%s)\n%s" % (p.name, " ".join(p.argv), shorten(p.output()))
                         for p in (self.server, self.client) if p is not None)


def shorten(text, width=160):
    """Lines cut to `width` characters (rping -v prints the whole ping)."""
    return "\n".join(l if len(l) <= width else "%s... (%d characters)" % (l[:width], len(l))
                     for l in text.splitlines())


def lines_matching(text, pattern):
    return [m for m in (re.match(pattern, l) for l in text.splitlines()) if m]


def show(what, lines):
    for l in lines[:3]:
        print("  %s| %s" % (what, l), flush=True)


# ---------------------------------------------------------------- rdmacm-utils

def rping(c, net, count, size, run_opts=()):
    """rping -s and rping -c with -C count -S size -V -v: every iteration's
    ping data, in order, on both sides (the server prints what it read with
    RDMA Read, the client what the server wrote back with RDMA Write)."""
    pair = Pair(c, net)
    addr = net.sides[SERVER]["addr"]
    common = ["-C", str(count), "-S", str(size), "-V", "-v"]
    srv, cli = pair.run(RPING_PORT, ["rping", "-s", "-a", addr] + common, ["rping", "-c", "-a", addr] + common,
                        run_opts)
    for who, text, prefix in (("server", srv, "server ping data: "), ("client", cli, "ping data: ")):
        pings = lines_matching(text, "^" + prefix + r"rdma-ping-(\d+): (.*)$")
        check([int(m.group(1)) for m in pings] == list(range(count)),
              "%s: ping data of iterations %s, expected 0..%d:\n%s" %
              (who, [m.group(1) for m in pings], count - 1, pair.outputs()))
        check(all(len(m.group(2)) > 0 for m in pings), "%s: empty ping data" % who)
        show(who, [m.group(0) for m in pings])


def case_rping(c, net):
    rping(c, net, 10, 100)


def case_rping_64k(c, net):
    """The largest size rping takes, 65535 bytes: Read and Write of many FPDUs."""
    rping(c, net, 5, 65535)


def case_rping_crc(c, net):
    """rping with MPA CRC32c asked for on both ends (`run --crc`)."""
    rping(c, net, 10, 4096, ["--crc"])


def case_ucmatose(c, net):
    """ucmatose with 4 connections of 10 messages each: both sides report the
    transfers complete and a return status 0."""
    pair = Pair(c, net)
    opts = ["-c", "4", "-C", "10", "-S", "1000"]
    srv, cli = pair.run(CM_PORT, ["ucmatose"] + opts, ["ucmatose", "-s", net.sides[SERVER]["addr"]] + opts)
    for who, text in (("server", srv), ("client", cli)):
        for line in ("data transfers complete", "test complete", "return status 0"):
            check(line in text.splitlines(), "%s: no line %r:\n%s" % (who, line, pair.outputs()))
        show(who, [l for l in text.splitlines() if "complete" in l])


def case_ucmatose_siw_client(c, net):
    """ucmatose's server sends first (10 Sends of 100 bytes once connected). Its client
    here is a kernel socket that reads its MPA reply as siw's initiator does, 20 ms
    after it came (interop/cmatose_peer.py): no FPDU may be behind the reply by then, or
    siw ends the connection. Then ten messages each way, and both close cleanly."""
    pair = Pair(c, net)
    addr = net.sides[SERVER]["addr"]
    pair.server = pair.start("server", SERVER, ["ucmatose", "-b", addr])
    wait_listening(net, pair.server, SERVER, CM_PORT, pair.deadline)
    pair.client = net.start("client", CLIENT, [sys.executable, CMATOSE_PEER, "--to", "%s:%d" % (addr, CM_PORT)])
    pair.expect_exit(pair.client, 0)
    pair.expect_exit(pair.server, 0)
    srv = pair.server.output().splitlines()
    for line in ("data transfers complete", "disconnected", "return status 0"):
        check(line in srv, "server: no line %r:\n%s" % (line, pair.outputs()))
    events = [json.loads(l) for l in pair.client.output().splitlines() if l.startswith("{")]
    want = [("mpa_reply", "extra_bytes", 0), ("received", "messages", 10), ("sent", "messages", 10),
            ("closed", "first", "peer"), ("done", "ok", True)]
    for event, key, value in want:
        got = [e for e in events if e.get("event") == event]
        check(len(got) == 1 and got[0].get(key) == value, "client: %s %s" % (event, got))
    show("server", [l for l in srv if "complete" in l])


def case_cmtime(c, net):
    """cmtime -c 10: the client connects and disconnects 10 connections and
    prints its step table; the server serves until stopped (it has no end of
    its own), then SIGTERM through run ends it."""
    pair = Pair(c, net)
    addr = net.sides[SERVER]["addr"]
    srv, cli = pair.run(CM_PORT, ["cmtime", "-b", addr], ["cmtime", "-s", addr, "-c", "10"], server_stays=True)
    check(lines_matching(cli, r"^step\s+total ms\s+max ms\s+min us\s+us / conn$"),
          "client: no step table:\n%s" % pair.outputs())
    for step in ("resolve addr", "resolve route", "create qp", "connect", "disconnect"):
        row = lines_matching(cli, r"^%s\s*:\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$" % re.escape(step))
        check(len(row) == 1 and float(row[0].group(1)) > 0, "client: step %r: %s:\n%s" %
              (step, [m.group(0) for m in row], pair.outputs()))
        show("client", [row[0].group(0)])


def case_rdma_server(c, net):
    """rdma_server and rdma_client (rdma_create_ep, inline Send, rdma_get_*_comp)."""
    pair = Pair(c, net)
    srv, cli = pair.run(CM_PORT, ["rdma_server"], ["rdma_client", "-s", net.sides[SERVER]["addr"]])
    for who, text, want in (("server", srv, ["rdma_server: start", "rdma_server: end 0"]),
                            ("client", cli, ["rdma_client: start", "rdma_client: end 0"])):
        check(text.splitlines()[-2:] == want, "%s: last lines %s, expected %s:\n%s" %
              (who, text.splitlines()[-2:], want, pair.outputs()))
        show(who, want)


# ---------------------------------------------------------------- perftest

BW_ITERS = 200
LAT_ITERS = 200
BW_SIZE = 65536  # perftest's default size for the bandwidth tests
LAT_SIZE = 2  # and for the latency tests
# A row of a bandwidth table: #bytes #iterations BW peak, BW average, MsgRate.
BW_ROW = r"^\s*%d\s+%d\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$"
PERF_TRIES = 4

# A row of a latency table: #bytes #iterations t_min t_max t_typical t_avg ...
LAT_ROW = r"^\s*%d\s+%d\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"


def perftest(c, net, program, iters, row, size, server_row=True, run_opts=()):
    """PROGRAM -R (connections by rdma_cm) -F (no CPU frequency check) -n iters:
    the client's result row for `size` bytes and `iters` iterations, with a
    figure above zero; the server's too where it prints one (all but
    ib_read_lat, whose server only answers), and on both sides the peer's
    queue pair as the rdma_cm exchange gave it ("remote address: ...")."""
    opts = ["-R", "-F", "-n", str(iters), "-p", str(PERF_PORT)]
    # perftest -R connects twice to one port: the server listens again only
    # after the first exchange, and a client quicker than that would be
    # refused and could not try again (its retry reuses ids it destroyed).
    # The runtime's listener grace (RuntimeConfig::listener_grace) leaves
    # that SYN unanswered, so the client's retransmission finds the new
    # listener. Over --dev a port with no listener may fall back to the
    # kernel, whose reset refuses the client (REJECTED -111): a refused
    # attempt is run again, at most PERF_TRIES times, and said so.
    for attempt in range(1, PERF_TRIES + 1):
        pair = Pair(c, net)
        try:
            srv, cli = pair.run(PERF_PORT, [program] + opts,
                                [program] + opts + [net.sides[SERVER]["addr"]], run_opts)
            break
        except Failure:
            refused = pair.client is not None and \
                "RDMA_CM_EVENT_REJECTED; error: -111" in pair.client.output()
            for p in (pair.server, pair.client):
                if p is not None:
                    p.kill()
            if not refused or attempt == PERF_TRIES:
                raise
            print("  attempt %d: the client's second connect came before the server listened "
                  "again (perftest's race); once more" % attempt, flush=True)
    rows = lines_matching(cli, row % (size, iters))
    check(len(rows) == 1, "client: no result row for %d bytes x %d:\n%s" % (size, iters, pair.outputs()))
    check(float(rows[0].group(2)) > 0, "client: a result of zero: %s" % rows[0].group(0))
    show("client", [rows[0].group(0)])
    for who, text in (("server", srv), ("client", cli)):
        check(lines_matching(text, r"^ remote address: LID \w+ QPN 0x[0-9a-f]+ PSN 0x[0-9a-f]+"),
              "%s: no remote address:\n%s" % (who, pair.outputs()))
    if server_row:
        rows = lines_matching(srv, row % (size, iters))
        check(len(rows) == 1, "server: no result row for %d bytes x %d:\n%s" % (size, iters, pair.outputs()))
        show("server", [rows[0].group(0)])


def case_ib_write_bw(c, net):
    perftest(c, net, "ib_write_bw", BW_ITERS, BW_ROW, BW_SIZE)


def case_ib_read_bw(c, net):
    perftest(c, net, "ib_read_bw", BW_ITERS, BW_ROW, BW_SIZE)


def case_ib_send_bw(c, net):
    perftest(c, net, "ib_send_bw", BW_ITERS, BW_ROW, BW_SIZE)


def case_ib_write_lat(c, net):
    perftest(c, net, "ib_write_lat", LAT_ITERS, LAT_ROW, LAT_SIZE)


def case_ib_read_lat(c, net):
    perftest(c, net, "ib_read_lat", LAT_ITERS, LAT_ROW, LAT_SIZE, server_row=False)


def case_ib_send_lat(c, net):
    perftest(c, net, "ib_send_lat", LAT_ITERS, LAT_ROW, LAT_SIZE)


def case_ib_send_lat_busy_poll(c, net):
    """The same with `run --busy-poll 50` on both sides: progress threads (and over
    --dev the interface's switch, started with --busy-poll) that never sleep."""
    perftest(c, net, "ib_send_lat", LAT_ITERS, LAT_ROW, LAT_SIZE, run_opts=("--busy-poll", "50"))


# ---------------------------------------------------------------- run --dev

def case_run_dev_checks(c, net):
    """`run --dev` (no program of RDMA needed): an address not on the
    interface is a usage error (2), a missing interface a setup error (1),
    both before the program starts; the variables of --dev, --ip and
    --xdp-mode reach the program, and IWCM_SWITCH names iwarp-cm."""
    side = net.sides[SERVER]
    ns, dev, addr = side["ns"], side["dev"], side["addr"]
    # The library only has to exist: the programs here use no RDMA. This
    # process's C library, which every program has loaded anyway.
    libc = [l.split()[-1] for l in open("/proc/self/maps") if "/libc.so" in l][0]
    env = ["env", "IWCM_LIBRARY=" + libc]
    marker = os.path.join(c.tmp, "ran")

    def run(*argv):
        return sh(*env, c.bin, "run", *argv, ns=ns, ok=False)
    for argv, code, err in ((["--dev", dev, "--ip", "10.96.99.9"], 2,
                             "iwarp-cm: --ip 10.96.99.9: not an address of %s (see iwarp-cm run --help)\n" % dev),
                            (["--dev", "nosuch0"], 1, "iwarp-cm run: --dev nosuch0: no such interface\n")):
        r = run(*argv, "--", "touch", marker)
        check(r.returncode == code and r.stderr == err, "%s: exit %d, %r; expected %d, %r" %
              (" ".join(argv), r.returncode, r.stderr, code, err))
        check(not os.path.exists(marker), "%s: the program ran" % " ".join(argv))
        print("  %s: %d, %s" % (" ".join(argv), code, err.strip()))
    # With --dev, the programs on the interface share it through its switch,
    # which iwarp-cm itself runs.
    switch = os.path.realpath(c.bin)
    for argv, want in ((["--dev", dev], {"IWCM_DEV": dev, "IWCM_SWITCH": switch}),
                       (["--dev", dev, "--ip", addr, "--xdp-mode", "generic"],
                        {"IWCM_DEV": dev, "IWCM_SWITCH": switch, "IWCM_IP": addr, "IWCM_XDP_MODE": "generic"})):
        r = run(*argv, "--", "env")
        got = {k: v for k, v in (l.split("=", 1) for l in r.stdout.splitlines() if "=" in l)
               if k.startswith("IWCM_") and k != "IWCM_LIBRARY"}
        check(r.returncode == 0 and got == want, "%s: exit %d, %s; expected %s (%r)" %
              (" ".join(argv), r.returncode, got, want, r.stderr))
        print("  %s: %s" % (" ".join(argv), got))


PROGRAM_CASES = ("rping", "rping_64k", "rping_crc", "ucmatose", "ucmatose_siw_client", "cmtime", "rdma_server", "ib_write_bw",
                 "ib_read_bw", "ib_send_bw", "ib_write_lat", "ib_read_lat", "ib_send_lat",
                 "ib_send_lat_busy_poll")
CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True)
    p.add_argument("mode", choices=("tap", "dev"))
    p.add_argument("case", choices=sorted(CASES))
    a = p.parse_args()
    a.bin = os.path.abspath(a.bin)
    if os.geteuid() != 0:
        print("FAIL: the program tests need root (network namespaces, TAP devices, AF_XDP)")
        return 1
    if a.case == "run_dev_checks" and a.mode != "dev":
        print("FAIL: run_dev_checks is a case of mode dev only")
        return 1
    subnet = 1 + sorted(CASES).index(a.case)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="iwcm-programs-") as tmp:
        a.tmp = tmp
        try:
            with (TapBridge if a.mode == "tap" else VethPair)(subnet, tmp) as net:
                CASES[a.case](a, net)
        except (Failure, Interrupted) as e:
            print("FAIL %s %s: %s" % (a.mode, a.case, e), flush=True)
            return 1
    print("PASS %s %s (%.1f s)" % (a.mode, a.case, time.monotonic() - start), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
