#!/usr/bin/env python3
"""`iwarp-cm rping` end to end (README "rping"): both ends of ours over two
TAPs on one bridge, and ours against rping_peer.py (rdma-core's rping exchange
over a kernel TCP socket) in both roles; tshark decodes every FPDU of our
capture. Needs root: each case makes its own namespace (interop_test.Net).

Read first: interop_test.py (Net, Case, Proc), rping_peer.py, tools/rping.hpp.

  rping_test.py --bin build/bin/iwarp-cm [--tmp DIR] CASE
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import interop_test  # noqa: E402
from interop_test import Net, check, check_capture, expect_exit, tshark  # noqa: E402

RPING_PEER = os.path.join(HERE, "rping_peer.py")
PORT = 7174
# RDMAP opcodes as tshark names them (iwarp_rdma.opcode).
OPCODES = {0: "write", 1: "read_request", 2: "read_response", 3: "send", 7: "terminate"}


def rping_pair(c, name, subnet, crc, count, size):
    """`rping -s` at .3 on tap1 and `rping -c` at .2 on tap0 (capturing): both
    exit 0 with `count` verified iterations. Returns (client, server, pcap)."""
    with Net(name, subnet, taps=("tap0", "tap1")) as net:
        pcap = c.pcap(name)
        opts = ["-C", str(count), "-S", str(size), "-V", "-v"] + (["--crc"] if crc else [])
        srv = c.cm(net, "cm-server", "rping", "-s", *opts, ip="10.99.%d.3/24" % subnet, tap="tap1")
        srv.wait_for("listening")
        net.wait_link_up(taps=("tap1",))
        cli = c.cm(net, "cm-client", "rping", "-c", "-a", "10.99.%d.3" % subnet, "--pcap", pcap, *opts)
        for proc, role in ((cli, "client"), (srv, "server")):
            expect_exit(proc, 0, timeout=120)
            s = proc.events("rping")
            check(len(s) == 1, "%s: rping lines %s" % (proc.name, s))
            s = s[0]
            check(s["role"] == role and s["iterations"] == count and s["verified"] is True
                  and s["size"] == size and s["error"] is None, "%s summary: %s" % (proc.name, s))
            pings = proc.events("ping_data")
            check([p["iteration"] for p in pings] == list(range(count)), "%s: ping_data %s" % (proc.name, pings))
            check(pings[-1]["data"].startswith("rdma-ping-%d: " % (count - 1)), "last ping: %s" % pings[-1])
            est = proc.events("established")
            check(len(est) == 1 and est[0]["crc"] == crc and est[0]["ird"] == 1 and est[0]["ord"] == 1,
                  "%s established: %s" % (proc.name, est))
        print("  client: %s" % cli.events("rping")[0], flush=True)
        return cli, srv, pcap


def fpdu_rows(pcap):
    """Every FPDU of a capture as (source address, RDMAP opcode name)."""
    out = tshark(pcap, "-Y", "iwarp_ddp_rdmap", "-T", "fields", "-e", "ip.src", "-e", "iwarp_rdma.opcode",
                 "-E", "occurrence=a", "-E", "aggregator=,")
    rows = []
    for line in out.splitlines():
        src, ops = (line.split("\t") + [""])[:2]
        rows += [(src, OPCODES.get(int(op, 16), "opcode " + op)) for op in ops.split(",")]
    return rows


def check_fpdus(pcap, crc, count, size, mss=1460, rtr=True, net=None):
    """tshark decodes every FPDU (issue 13 item 8): the RTR, and per iteration
    two Sends each way, one Read Request, and the Read Responses and Writes of
    `size` bytes, one per FPDU of at most the MSS; with --crc every CRC32c is
    good, without it every CRC field is zero. `net`: the kernel is the peer
    (check_capture)."""
    check_capture(pcap, net)
    rows = fpdu_rows(pcap)
    kinds = {}
    for _, op in rows:
        kinds[op] = kinds.get(op, 0) + 1
    print("  FPDUs in the capture: %s" % kinds, flush=True)
    segs = -(-size // (mss - 2 - 14 - 4))  # the payload of a tagged FPDU: MSS - length, header, CRC
    want = {"send": 4 * count + (1 if rtr else 0), "read_request": count, "read_response": count * segs,
            "write": count * segs}
    check(kinds == want, "FPDUs %s, expected %s" % (kinds, want))
    detail = tshark(pcap, "-Y", "iwarp_ddp_rdmap", "-V")
    good, zero = detail.count("(Good CRC32)"), detail.count("CRC: 0x00000000")
    if crc:
        check(good == len(rows) and "Bad CRC" not in detail, "%d good CRCs of %d FPDUs" % (good, len(rows)))
    else:
        check(zero == len(rows) and good == 0, "%d zero CRC fields of %d FPDUs" % (zero, len(rows)))


def case_rping_pair(c):
    """iwarp-cm rping -s against iwarp-cm rping -c, -C 50 -S 4096 -V, no CRC."""
    _, _, pcap = rping_pair(c, "rping-pair", 60, False, 50, 4096)
    check_fpdus(pcap, False, 50, 4096)


def case_rping_pair_crc(c):
    """The same with --crc: tshark checks every FPDU's CRC32c."""
    _, _, pcap = rping_pair(c, "rping-pair-crc", 61, True, 50, 4096)
    check_fpdus(pcap, True, 50, 4096)


def kernel_peer(net, name, *argv):
    return net.start(name, ["python3", RPING_PEER] + list(argv))


def check_summary(cm, role, count, size):
    s = cm.events("rping")
    check(len(s) == 1 and s[0]["role"] == role and s[0]["iterations"] == count and s[0]["verified"] is True
          and s[0]["size"] == size, "%s summary: %s" % (cm.name, s))


def case_rping_kernel_client(c):
    """iwarp-cm rping -c against rping_peer.py's server on a kernel socket,
    with and without CRC: 50 verified iterations of 4096 bytes each; the
    peer checks what it read and we check what it wrote back."""
    count, size = 50, 4096
    for crc in (True, False):
        with Net("rping-kc", 62) as net:
            pcap = c.pcap("rping-kernel-client")
            flags = ["--crc"] if crc else []
            srv = kernel_peer(net, "peer", "server", "--bind", "%s:%d" % (net.kernel4, PORT), "-C", str(count),
                              "-S", str(size), "-V", *flags)
            srv.wait_for("listening")
            cm = c.cm(net, "cm", "rping", "-c", "-a", net.kernel4, "-C", str(count), "-S", str(size), "-V",
                      "--pcap", pcap, *flags)
            expect_exit(cm, 0, timeout=120)
            check(srv.finish(60) == 0, "the kernel peer failed")
            done = srv.events("done")
            check(len(done) == 1 and done[0]["iterations"] == count, "peer: %s" % done)
            reads = srv.events("read_done")
            check(len(reads) == count and all(r["verified"] for r in reads), "peer reads: %s" % reads[-1:])
            check_summary(cm, "client", count, size)
            est = cm.events("established")
            check(len(est) == 1 and est[0]["crc"] == crc, "established: %s" % est)
            check_fpdus(pcap, crc, count, size, rtr=False, net=net)


def case_rping_kernel_server(c):
    """iwarp-cm rping -s against rping_peer.py's client, with and without CRC:
    the peer verifies each iteration's data written back, we verify what we read."""
    count, size = 50, 4096
    for crc in (True, False):
        with Net("rping-ks", 63) as net:
            flags = ["--crc"] if crc else []
            cm = c.cm(net, "cm", "rping", "-s", "-C", str(count), "-S", str(size), "-V", *flags)
            cm.wait_for("listening")
            net.wait_link_up()
            cli = kernel_peer(net, "peer", "client", "--to", "10.99.63.2:%d" % PORT, "-C", str(count),
                              "-S", str(size), "-V", *flags)
            check(cli.finish(120) == 0, "the kernel peer failed")
            pings = cli.events("ping")
            check(len(pings) == count and all(p["verified"] for p in pings), "peer pings: %s" % pings[-1:])
            expect_exit(cm, 0, timeout=60)
            check_summary(cm, "server", count, size)


# ---- peer-to-peer RTRs (RFC 6581 section 6) against the drivers' behaviour ----

# What each RTR adds to the FPDUs of the exchange (check_fpdus' counts).
RTR_FPDUS = {"send": {"send": 1}, "write": {"write": 1}, "read": {"read_request": 1, "read_response": 1}}


def check_rtr_fpdus(pcap, rtr, count, size, initiator, mss=1460):
    """Every FPDU of the capture decoded: the exchange's plus the RTR's (the READ RTR's
    zero-length Read Response included); the initiator's first FPDU is the RTR, and a READ
    RTR's answer is the responder's first FPDU, before any of its data."""
    rows = fpdu_rows(pcap)
    kinds = {}
    for _, op in rows:
        kinds[op] = kinds.get(op, 0) + 1
    segs = -(-size // (mss - 2 - 14 - 4))
    want = {"send": 4 * count, "read_request": count, "read_response": count * segs, "write": count * segs}
    for op, n in RTR_FPDUS[rtr].items():
        want[op] += n
    print("  FPDUs in the capture: %s" % kinds, flush=True)
    check(kinds == want, "FPDUs %s, expected %s" % (kinds, want))
    first = [op for src, op in rows if src == initiator][:1]
    check(first == [{"send": "send", "write": "write", "read": "read_request"}[rtr]],
          "the initiator's first FPDU: %s" % first)
    if rtr == "read":
        theirs = [op for src, op in rows if src != initiator][:1]
        check(theirs == ["read_response"], "the responder's first FPDU: %s" % theirs)


def case_rtr_irdma_responder(c):
    """iwarp-cm rping -c (the initiator) against rping_peer.py's server playing irdma's
    responder: offered all three types it picks READ (answering our zero-length Read
    Request with a zero-length Read Response), offered WRITE and SEND it picks WRITE,
    offered SEND alone SEND (READ also with CRC). Each way 5 verified iterations; the peer
    checks our MSNs (our first Send after a SEND RTR is 2) and we take its Read Response
    silently."""
    count, size = 5, 4096
    for offer, picked, crc in (("send,write,read", "read", False), ("send,write,read", "read", True),
                               ("send,write", "write", False), ("send", "send", False)):
        print("  we offer %s, the peer picks %s (CRC %s)" % (offer, picked, crc), flush=True)
        flags = ["--crc"] if crc else []
        with Net("rtr-irdma", 64) as net:
            pcap = c.pcap("rtr-irdma-" + picked + ("-crc" if crc else ""))
            srv = kernel_peer(net, "peer", "server", "--p2p", "--bind", "%s:%d" % (net.kernel4, PORT),
                              "-C", str(count), "-S", str(size), "-V", *flags)
            srv.wait_for("listening")
            offer_flags = [] if offer == "send,write,read" else ["--rtr", offer]  # the default
            cm = c.cm(net, "cm", "rping", "-c", "-a", net.kernel4, "-C", str(count), "-S", str(size), "-V",
                      "--pcap", pcap, *offer_flags, *flags)
            expect_exit(cm, 0, timeout=120)
            check(srv.finish(60) == 0, "the irdma-like peer failed")
            got = srv.events("rtr_received")
            check(len(got) == 1 and got[0]["type"] == picked, "peer's RTR: %s" % got)
            check(len(srv.events("rtr_read_response_sent")) == (picked == "read"), "read response")
            check(not srv.events("msn_mismatch"), "MSNs: %s" % srv.events("msn_mismatch"))
            reads = srv.events("read_done")
            check(len(reads) == count and all(r["verified"] for r in reads), "peer reads: %s" % reads[-1:])
            check_summary(cm, "client", count, size)
            est = cm.events("established")
            check(len(est) == 1 and est[0]["p2p"] is True and est[0]["rtr"] == picked and est[0]["crc"] == crc,
                  "established: %s" % est)
            check(not cm.events("terminate_sent") and not cm.events("terminate_received"), "a TERMINATE passed")
            check_capture(pcap, net)
            check_rtr_fpdus(pcap, picked, count, size, initiator="10.99.64.2")


def case_rtr_siw_initiator(c):
    """iwarp-cm rping -s (the responder) against rping_peer.py's client playing siw's
    initiator with each RTR type (siw_qp_mpa_rts: a zero-length Write, or a zero-length
    Read Request to sink STag 0 kept in its outstanding reads, ORD 1, so the client starts
    only once it is answered; a zero-length Send MSN 1, then the first Send is MSN 2); the
    READ RTR also with CRC (the peer checks the answer's CRC32c)."""
    count, size = 5, 4096
    for rtr, crc in (("read", False), ("read", True), ("write", False), ("send", False)):
        print("  the peer sends a %s RTR (CRC %s)" % (rtr, crc), flush=True)
        flags = ["--crc"] if crc else []
        with Net("rtr-siw", 65) as net:
            pcap = c.pcap("rtr-siw-" + rtr + ("-crc" if crc else ""))
            cm = c.cm(net, "cm", "rping", "-s", "-C", str(count), "-S", str(size), "-V", "--pcap", pcap)
            cm.wait_for("listening")
            net.wait_link_up()
            cli = kernel_peer(net, "peer", "client", "--rtr", rtr, "--settle", "0", "--timeout", "20",
                              "--to", "10.99.65.2:%d" % PORT, "-C", str(count), "-S", str(size), "-V", *flags)
            check(cli.finish(120) == 0, "the siw-like peer failed")
            check(len(cli.events("rtr_read_response")) == (rtr == "read"), "RTR read response")
            check(not cli.events("msn_mismatch"), "MSNs: %s" % cli.events("msn_mismatch"))
            pings = cli.events("ping")
            check(len(pings) == count and all(p["verified"] for p in pings), "peer pings: %s" % pings[-1:])
            expect_exit(cm, 0, timeout=60)
            check_summary(cm, "server", count, size)
            est = cm.events("established")
            check(len(est) == 1 and est[0]["rtr"] == rtr and est[0]["crc"] == crc, "established: %s" % est)
            check(not cm.events("terminate_sent") and not cm.events("terminate_received"), "a TERMINATE passed")
            check_capture(pcap, net)
            check_rtr_fpdus(pcap, rtr, count, size, initiator=net.kernel4)


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


if __name__ == "__main__":
    sys.exit(interop_test.main(CASES, __doc__))
