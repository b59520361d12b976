#!/usr/bin/env python3
"""`iwarp-cm rping` end to end (docs/rping.md): both ends of ours over two
TAPs on one bridge, and ours against rping_peer.py (rdma-core's rping exchange
over a kernel TCP socket) in both roles; tshark decodes every FPDU of our
capture. Needs root: each case makes its own namespace (interop_test.Net).

Read first: interop_test.py (Net, Case, Proc), rping_peer.py, tools/rping.hpp.

  rping_test.py --bin build/bin/iwarp-cm [--tmp DIR] CASE
"""
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import interop_test  # noqa: E402
from interop_test import Net, check, check_capture, expect_exit, stats_of, tshark  # noqa: E402

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
    the peer verifies each iteration's data written back, we verify what we read.
    The client sends its first FPDU right after our MPA reply (--settle 0): the
    pause it keeps for siw's responder race must not be what makes ours work."""
    count, size = 50, 4096
    for crc in (True, False):
        with Net("rping-ks", 63) as net:
            flags = ["--crc"] if crc else []
            cm = c.cm(net, "cm", "rping", "-s", "-C", str(count), "-S", str(size), "-V", *flags)
            cm.wait_for("listening")
            net.wait_link_up()
            cli = kernel_peer(net, "peer", "client", "--to", "10.99.63.2:%d" % PORT, "-C", str(count),
                              "-S", str(size), "-V", "--settle", "0", *flags)
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
# ---------------------------------------------------------------- the close after an error
# (issue 37): a TERMINATE reaches the peer, then our FIN, and no RST while the
# peer closes normally; a close the peer does not finish ends in an RST when
# rping's close limit (5 s) runs out. Against rping_peer.py's close faults.

CLOSE_LIMIT = 5


def frames_from(pcap, src):
    """Our TCP frames in a capture: (frame number, raw seq, FIN, RST, RDMAP opcodes, payload
    length). tshark decodes no FPDU in a retransmission: its opcodes are empty."""
    out = tshark(pcap, "-Y", "ip.src == %s && tcp" % src, "-T", "fields", "-e", "frame.number",
                 "-e", "tcp.seq_raw", "-e", "tcp.flags.fin", "-e", "tcp.flags.reset", "-e", "iwarp_rdma.opcode",
                 "-e", "tcp.len", "-E", "occurrence=a", "-E", "aggregator=,")
    rows = []
    for line in out.splitlines():
        num, seq, fin, rst, ops, length = (line.split("\t") + [""] * 6)[:6]
        on = lambda v: v in ("1", "True")  # noqa: E731 (tshark prints either)
        rows.append((int(num), int(seq), on(fin), on(rst), [int(o, 16) for o in ops.split(",") if o],
                     int(length or 0)))
    return rows


def kernel_states(net, port=PORT):
    """The kernel's TCP states of its sockets on `port` (ss -tan in the namespace)."""
    out = interop_test.sh("ss", "-tanH", ns=net.ns).stdout
    return [l.split()[0] for l in out.splitlines() if (":%d " % port) in l and "LISTEN" not in l]


def wait_kernel_not(net, states, timeout=10):
    """A bounded poll until none of the kernel's sockets on the port is in `states`."""
    end = time.monotonic() + timeout
    while True:
        now = kernel_states(net)
        if not set(now) & set(states):
            return now
        check(time.monotonic() < end, "kernel sockets still %s after %.0f s" % (now, timeout))
        time.sleep(0.05)


def cm_ip(net):
    return "10.99.%d.2" % net.n


def check_fin_no_rst(pcap, net, after_opcode=None):
    """Our frames: a FIN (after the first FPDU with `after_opcode`, when given) and no RST."""
    ours = frames_from(pcap, cm_ip(net))
    fins = [r for r in ours if r[2]]
    check(fins, "no FIN from us: %s" % ours[-5:])
    check(not [r for r in ours if r[3]], "an RST from us: %s" % [r for r in ours if r[3]])
    if after_opcode is not None:
        first = [r for r in ours if after_opcode in r[4]]
        check(first and fins[0][0] >= first[0][0], "our FIN %s before the FPDU %s" % (fins[0], first[:1]))
    return ours


def nft_drop_once(net, length):
    """Drops, once, the first IPv4 TCP segment from the CM to the kernel whose
    IP total length is `length` with a 20-byte TCP header, or `length` + 12
    with timestamps (a 32-byte header)."""
    rules = ("add table inet iwcm_term\n"
             "add chain inet iwcm_term in { type filter hook input priority 0; policy accept; }\n")
    for doff, extra in ((5, 0), (8, 12)):
        rules += ("add rule inet iwcm_term in ip saddr %s tcp doff %d ip length %d quota until %d bytes "
                  "counter drop\n" % (cm_ip(net), doff, length + extra, length + extra + 1))
    r = subprocess.run(["ip", "netns", "exec", net.ns, "nft", "-f", "-"], input=rules, text=True,
                       capture_output=True, timeout=30)
    check(r.returncode == 0, "nft failed (nftables needed): %s" % r.stderr)


def nft_dropped(net, table):
    out = interop_test.sh("nft", "list", "table", "inet", table, ns=net.ns).stdout
    return sum(int(l.split("packets")[1].split()[0]) for l in out.splitlines() if "counter packets" in l)


def terminate_sent_case(c, name, subnet, lose):
    """The peer spoils the CRC of its first FPDU (the Read Request): our MPA
    TERMINATE (CRC error) reaches it, then our FIN; the peer closes after it
    and no RST is sent; rping exits 6. `lose`: nftables drops the segment with
    our TERMINATE once (28 bytes: length, untagged header, control, CRC), and
    TCP retransmits it (the same sequence number) before rping exits."""
    with Net(name, subnet) as net:
        if lose:
            nft_drop_once(net, 20 + 20 + 28)
        pcap = c.pcap(name)
        srv = kernel_peer(net, "peer", "server", "--bind", "%s:%d" % (net.kernel4, PORT), "--crc",
                          "--corrupt-crc", "1", "-C", "1")
        srv.wait_for("listening")
        cm = c.cm(net, "cm", "rping", "-c", "-a", net.kernel4, "-C", "1", "--crc", "--pcap", pcap)
        st = expect_exit(cm, 6, timeout=30)
        check(srv.finish(30) == 1, "the kernel peer did not see the Terminate")
        term = srv.events("terminate")
        check(len(term) == 1 and term[0]["layer"] == 2 and term[0]["etype"] == 0 and term[0]["ecode"] == 2,
              "peer: %s" % term)
        closed = srv.events("closed")
        check(len(closed) == 1 and closed[0]["peer_eof"] and not closed[0]["reset_by_peer"], "peer: %s" % closed)
        sent = cm.events("terminate_sent")
        check(len(sent) == 1 and sent[0]["layer"] == 2 and sent[0]["code"] == 2, "cm: %s" % sent)
        check(st["resets_sent"] == 0, "stats: %s" % st)
        ours = check_fin_no_rst(pcap, net, after_opcode=7)
        if lose:
            dropped = nft_dropped(net, "iwcm_term")
            check(dropped == 1, "nft dropped %d segments, not 1" % dropped)
            terms = [r for r in ours if 7 in r[4]]
            check(len(terms) == 1 and terms[0][5] == 28, "our TERMINATE: %s" % terms)
            again = [r for r in ours if r[1] == terms[0][1] and r[5] == 28 and r[0] > terms[0][0]]
            check(again, "our TERMINATE not retransmitted: %s" % ours[-6:])
        else:
            check_capture(pcap, net)
        wait_kernel_not(net, ("ESTAB", "CLOSE-WAIT"))


def case_rping_connect_timeout(c):
    """A kernel listener completes the handshake and never answers the MPA
    request: rping -c exits 5 once --timeout runs out, and says so. 12.5 s lies
    past the core's default MPA reply timeout (10 s after the request, which
    leaves within the first second): the reply wait follows --timeout, as
    connect's does, so the deadline ends the attempt."""
    with Net("rping-ct", 84) as net:
        interop_test.expect_deadline_unanswered(c, net, PORT, ["rping", "-c", "-a", net.kernel4], "12.5")


def case_rping_terminate_sent(c):
    """Our TERMINATE, then our FIN, no RST (terminate_sent_case)."""
    terminate_sent_case(c, "rping-terminate-sent", 64, False)


def case_rping_terminate_received(c):
    """The peer sends a TERMINATE in place of its first FPDU: we report it,
    close with a FIN, no RST; the peer reads our FIN and closes; exit 6."""
    with Net("rping-term-recv", 65) as net:
        pcap = c.pcap("rping-terminate-received")
        srv = kernel_peer(net, "peer", "server", "--bind", "%s:%d" % (net.kernel4, PORT), "--send-terminate",
                          "1", "-C", "1")
        srv.wait_for("listening")
        cm = c.cm(net, "cm", "rping", "-c", "-a", net.kernel4, "-C", "1", "--pcap", pcap)
        st = expect_exit(cm, 6, timeout=30)
        check(srv.finish(30) == 1, "the kernel peer failed otherwise")
        check(len(srv.events("terminate_sent")) == 1, "peer sent no Terminate")
        closed = srv.events("closed")
        check(len(closed) == 1 and closed[0]["peer_eof"] and not closed[0]["reset_by_peer"], "peer: %s" % closed)
        got = cm.events("terminate_received")
        check(len(got) == 1 and got[0]["layer"] == 0 and got[0]["etype"] == 2 and got[0]["code"] == 7,
              "cm: %s" % got)
        check(st["resets_sent"] == 0, "stats: %s" % st)
        check_fin_no_rst(pcap, net)
        check_capture(pcap, net)
        wait_kernel_not(net, ("ESTAB", "CLOSE-WAIT"))


def case_rping_terminate_lost(c):
    """The same with the segment of our TERMINATE lost once: it is retransmitted."""
    terminate_sent_case(c, "rping-terminate-lost", 66, True)


def close_limit_case(c, name, subnet, peer_args, cm_args, code, on_start=None):
    """rping -c against a peer that does not let the close finish: it exits
    with `code` within --timeout + the close limit (and slack), a reset_sent
    line saying the close limit ran out, an RST in the capture, and the
    kernel's socket is not left ESTABLISHED or CLOSE_WAIT. Returns (cm, peer,
    our frames)."""
    with Net(name, subnet) as net:
        pcap = c.pcap(name)
        srv = kernel_peer(net, "peer", "server", "--bind", "%s:%d" % (net.kernel4, PORT), *peer_args)
        srv.wait_for("listening")
        start = time.monotonic()
        cm = c.cm(net, "cm", "rping", "-c", "-a", net.kernel4, "--timeout", "2", "--pcap", pcap, *cm_args)
        if on_start:
            on_start(net, srv)
        st = expect_exit(cm, code, timeout=40)
        took = time.monotonic() - start
        check(took < 2 + CLOSE_LIMIT + 8, "rping took %.1f s" % took)
        resets = cm.events("reset_sent")
        check(len(resets) == 1 and resets[0]["connections"] == 1
              and resets[0]["why"] == "not closed within the close limit", "reset_sent: %s" % resets)
        # One RST; a second answers the challenge ACK (RFC 5961) an RST in the
        # peer's window but past its RCV.NXT draws (our lost FIN's sequence).
        check(st["resets_sent"] in (1, 2), "stats: %s" % st)
        ours = frames_from(pcap, cm_ip(net))
        check([r for r in ours if r[3]], "no RST from us: %s" % ours[-5:])
        left = wait_kernel_not(net, ("ESTAB", "CLOSE-WAIT"))
        print("  rping exited after %.1f s; kernel sockets now %s" % (took, left), flush=True)
        srv.finish(30)
        return cm, srv, ours


def check_held_reset(srv):
    held = srv.events("held")
    check(len(held) == 1 and held[0]["reset"] and held[0]["tcp_state"] == "CLOSE", "peer: %s" % held)


def case_rping_close_zero_window(c):
    """The peer (SO_RCVBUF 4096) stops reading after our first Send: our Read
    Response of 65535 bytes fills its window (zero window). The stall timer
    (--timeout 2) fires; our FIN waits behind the bytes the window holds back,
    and the close limit ends it with an RST at the window's edge, which the
    kernel takes (its socket goes to CLOSE)."""
    _, srv, ours = close_limit_case(c, "rping-close-zwin", 67, ["--rcvbuf", "4096", "--stall-after", "1",
                                                               "-S", "65535"], ["-S", "65535", "-C", "1"], 5)
    check_held_reset(srv)


def case_rping_close_lost(c):
    """After three iterations nftables drops every segment from us to the
    peer but RSTs: the stall timer fires, our FIN is retransmitted and lost,
    and the close limit ends it with an RST the peer gets."""
    def cut(net, srv):
        while srv.wait_for("read_done", timeout=30)["iteration"] < 2:
            pass
        rules = ("add table inet iwcm_cut\n"
                 "add chain inet iwcm_cut in { type filter hook input priority 0; policy accept; }\n"
                 "add rule inet iwcm_cut in ip saddr %s tcp flags & rst == 0 counter drop\n" % cm_ip(net))
        r = subprocess.run(["ip", "netns", "exec", net.ns, "nft", "-f", "-"], input=rules, text=True,
                           capture_output=True, timeout=30)
        check(r.returncode == 0, "nft failed (nftables needed): %s" % r.stderr)

    _, srv, ours = close_limit_case(c, "rping-close-lost", 68, ["--timeout", "20"], ["-C", "0"], 5, cut)
    fins = [r for r in ours if r[2]]
    rsts = [r for r in ours if r[3]]
    check(len(fins) >= 2 and rsts[0][0] > fins[-1][0], "FINs %s then RST %s" % (fins, rsts))
    err = srv.events("error")
    check(len(err) == 1 and "ConnectionResetError" in err[0]["error"], "peer: %s" % err)


def case_rping_close_never(c):
    """The peer reads our FIN after three iterations and never closes: our
    FIN_WAIT_2 ends with an RST when the close limit runs out; the pings
    succeeded, so rping exits 0."""
    _, srv, ours = close_limit_case(c, "rping-close-never", 69, ["-C", "3", "--no-close"], ["-C", "3"], 0)
    fins = [r for r in ours if r[2]]
    rsts = [r for r in ours if r[3]]
    check(fins and rsts[0][0] > fins[0][0], "FIN %s then RST %s" % (fins, rsts))
    check_held_reset(srv)


def case_rping_truncated_fpdu(c):
    """The client (rping_peer.py) ends its stream in the middle of its 7th
    FPDU (the start Send of its third iteration): our server without -C does
    not take that as the client's clean close between iterations: it exits
    6, a protocol error, after two iterations."""
    with Net("rping-truncated", 70) as net:
        cm = c.cm(net, "cm", "rping", "-s")
        cm.wait_for("listening")
        net.wait_link_up()
        cli = kernel_peer(net, "peer", "client", "--to", "%s:%d" % (cm_ip(net), PORT), "-C", "3", "--truncate",
                          "7")
        cli.finish(60)
        check(len(cli.events("truncated")) == 1 and len(cli.events("ping")) == 2, "peer: %s" % cli.lines)
        expect_exit(cm, 6, timeout=30)
        disc = cm.events("disconnected")
        check(len(disc) == 1 and disc[0]["status"] == -71, "disconnected: %s" % disc)  # -EPROTO
        s = cm.events("rping")
        check(len(s) == 1 and s[0]["iterations"] == 2 and "Protocol error" in (s[0]["error"] or ""),
              "summary: %s" % s)


def case_rping_sigint(c):
    """Ctrl-C on an endless `rping -c` against an endless `rping -s`, both
    ours: the client closes gracefully and sees the close finish (no reset,
    exit 130 as connect and listen on SIGINT), and the server takes the
    client's close as the end of its -C 0 run (exit 0)."""
    with Net("rping-sigint", 76, taps=("tap0", "tap1")) as net:
        pcap = c.pcap("rping-sigint")
        srv = c.cm(net, "cm-server", "rping", "-s", "-C", "0", "-V", ip="10.99.76.3/24", tap="tap1")
        srv.wait_for("listening")
        net.wait_link_up(taps=("tap1",))
        cli = c.cm(net, "cm-client", "rping", "-c", "-a", "10.99.76.3", "-C", "0", "-V", "-v", "--pcap", pcap)
        for _ in range(5):
            cli.wait_for("ping_data", timeout=30)
        cli.p.send_signal(signal.SIGINT)
        st_cli = expect_exit(cli, 130, timeout=30)
        st_srv = expect_exit(srv, 0, timeout=30)
        check("SIGINT" in cli.stderr, "client's reason: %r" % cli.stderr)
        for proc, st in ((cli, st_cli), (srv, st_srv)):
            check(not proc.events("reset_sent"), "%s: %s" % (proc.name, proc.events("reset_sent")))
            check(st["resets_sent"] == 0, "%s stats: %s" % (proc.name, st))
            s = proc.events("rping")
            check(len(s) == 1 and s[0]["iterations"] >= 5, "%s summary: %s" % (proc.name, s))
        check(srv.events("rping")[0]["error"] is None, "server: %s" % srv.events("rping"))
        # The close finished in a round trip: no wait for the grace limit (2 s).
        took = cli.events("rping")[0]["time"] - cli.events("ping_data")[-1]["time"]
        check(took < 1.0, "the client ended %.3f s after its last iteration" % took)
        rows = frames_from(pcap, "10.99.76.2") + frames_from(pcap, "10.99.76.3")
        check(not [r for r in rows if r[3]], "an RST in the capture")
        check(len([r for r in rows if r[2]]) == 2, "not one FIN each way: %s" % [r for r in rows if r[2]])


def case_rping_sigint_both(c):
    """Ctrl-C reaching both ends (one terminal's process group): an
    endless client and an endless server, both ours, each close gracefully
    (one FIN each way, no RST, no reset_sent line, resets_sent 0), end
    within a second of the signal rather than after the grace limit (2 s).
    The client exits 130 as interrupted; the server exits 130 too, or 0 when
    the client's close reached it before its own signal (an endless server
    whose client left ends cleanly)."""
    with Net("rping-sigint-both", 83, taps=("tap0", "tap1")) as net:
        pcap = c.pcap("rping-sigint-both")
        srv = c.cm(net, "cm-server", "rping", "-s", "-C", "0", "-V", ip="10.99.83.3/24", tap="tap1")
        srv.wait_for("listening")
        net.wait_link_up(taps=("tap1",))
        cli = c.cm(net, "cm-client", "rping", "-c", "-a", "10.99.83.3", "-C", "0", "-V", "-v", "--settle", "0",
                   "--pcap", pcap)
        for _ in range(5):
            cli.wait_for("ping_data", timeout=30)
        start = time.monotonic()
        # A terminal's Ctrl-C reaches both at once, before a close could
        # travel between them. Sent one after the other, the client's goes
        # first: the server's close could otherwise reach the client before
        # its own signal and end its run as a peer's close (exit 6).
        cli.p.send_signal(signal.SIGINT)
        srv.p.send_signal(signal.SIGINT)
        st_cli = expect_exit(cli, 130, timeout=30)
        rc_srv = srv.finish(30)
        check(rc_srv in (0, 130), "cm-server: exit code %s, expected 130 or 0 (stderr: %s)"
              % (rc_srv, srv.stderr.strip()))
        st_srv = stats_of(srv)
        took = time.monotonic() - start
        check(took < 1.5, "both ended %.3f s after the signal" % took)
        for proc, st in ((cli, st_cli), (srv, st_srv)):
            interrupted = proc is cli or rc_srv == 130
            check(("SIGINT" in proc.stderr) == interrupted, "%s's reason: %r" % (proc.name, proc.stderr))
            check(not proc.events("reset_sent") and st["resets_sent"] == 0, "%s: %s" % (proc.name, st))
            s = proc.events("rping")
            check(len(s) == 1 and s[0]["iterations"] >= 5 and s[0]["verified"] is True, "%s: %s" % (proc.name, s))
        rows = frames_from(pcap, "10.99.83.2") + frames_from(pcap, "10.99.83.3")
        check(not [r for r in rows if r[3]], "an RST in the capture")
        check(len([r for r in rows if r[2]]) == 2, "not one FIN each way: %s" % [r for r in rows if r[2]])


def case_rping_figures(c):
    """The summary's figures leave out --settle: -C 20 after a settle of 1.5 s
    takes far less than it on both ends; iterations per second, MB/s and the
    latency per iteration agree with the iterations, bytes and seconds. The
    client binds with -I to --ip's address, takes -t as its TOS (on its SYN in
    the capture) and -q; -d traces frames on stderr, not stdout."""
    count = 20
    with Net("rping-fig", 79, taps=("tap0", "tap1")) as net:
        pcap = c.pcap("rping-figures")
        srv = c.cm(net, "cm-server", "rping", "-s", "-C", str(count), "-V", ip="10.99.79.3/24", tap="tap1")
        srv.wait_for("listening")
        net.wait_link_up(taps=("tap1",))
        cli = c.cm(net, "cm-client", "rping", "-c", "-a", "10.99.79.3", "-I", "10.99.79.2", "-C", str(count),
                   "-V", "-q", "-d", "-t", "0x20", "--settle", "1500", "--pcap", pcap)
        for proc, role in ((cli, "client"), (srv, "server")):
            expect_exit(proc, 0, timeout=60)
            s = proc.events("rping")
            check(len(s) == 1 and s[0]["iterations"] == count and s[0]["verified"] is True, "%s: %s" % (proc.name, s))
            s = s[0]
            est = proc.events("established")[0]
            check(s["time"] - est["time"] >= 1.5 if role == "client" else True,
                  "%s: the run took %.3f s, less than --settle" % (proc.name, s["time"] - est["time"]))
            check(0 < s["seconds"] < 1.0, "%s: seconds %s includes the settle wait" % (proc.name, s["seconds"]))
            check(abs(s["iterations_per_s"] - count / s["seconds"]) <= 0.01 * count / s["seconds"] + 0.1,
                  "%s: iterations_per_s %s for %d in %s s" % (proc.name, s["iterations_per_s"], count, s["seconds"]))
            check(abs(s["mbyte_s"] - s["bytes"] / s["seconds"] / 1e6) <= 0.01 * s["mbyte_s"] + 0.001,
                  "%s: mbyte_s %s for %d bytes in %s s" % (proc.name, s["mbyte_s"], s["bytes"], s["seconds"]))
            check(abs(s["latency_us"] - s["seconds"] / count * 1e6) <= 0.01 * s["latency_us"] + 0.1,
                  "%s: latency_us %s" % (proc.name, s["latency_us"]))
            check(proc.events("stats")[0]["live_nodes"] == 0, "%s: %s" % (proc.name, proc.events("stats")))
        check(cli.events("established")[0]["local"].startswith("10.99.79.2:"), "client: %s" % cli.events("established"))
        check(" out " in cli.stderr or "out " in cli.stderr, "-d printed no frame: %r" % cli.stderr[:300])
        check("] out" not in srv.stderr, "the server traced without -d: %r" % srv.stderr[:300])
        tos = tshark(pcap, "-Y", "tcp.flags.syn == 1 && tcp.flags.ack == 0", "-T", "fields", "-e", "ip.dsfield")
        check(tos.split() == ["0x20"], "the SYN's TOS: %r" % tos)


def case_rping_persistent(c):
    """rping -s -P serves client after client: two clients of -C 3 one after
    the other, each summed up on its own line; SIGINT between clients ends
    the server (130) with no connection to reset."""
    with Net("rping-pers", 80, taps=("tap0", "tap1")) as net:
        srv = c.cm(net, "cm-server", "rping", "-s", "-P", "-C", "3", "-V", ip="10.99.80.3/24", tap="tap1")
        srv.wait_for("listening")
        net.wait_link_up(taps=("tap1",))
        for n in (1, 2):
            cli = c.cm(net, "cm-client%d" % n, "rping", "-c", "-a", "10.99.80.3", "-C", "3", "-V",
                       "--settle", "0")
            expect_exit(cli, 0, timeout=60)
            srv.wait_for("rping", timeout=20)
            s = srv.events("rping")
            check(len(s) == n and s[-1]["iterations"] == 3 and s[-1]["verified"] is True and s[-1]["error"] is None,
                  "server after client %d: %s" % (n, s))
        srv.p.send_signal(signal.SIGINT)
        st = expect_exit(srv, 130, timeout=30)
        check("after 2 clients" in srv.stderr, "server's reason: %r" % srv.stderr)
        check(st["accepts"] == 2 and st["resets_sent"] == 0 and not srv.events("reset_sent"), "stats: %s" % st)
        check(len(srv.events("rping")) == 2, "a summary without a client: %s" % srv.events("rping"))


def case_rping_progress(c):
    """An endless `rping -c` with stderr on a terminal draws a progress line
    there (redrawn with '\r': iterations, rate, seconds); --no-progress, or
    stderr on a pipe, draws none. The server is ours (-P -C 0)."""
    with Net("rping-prog", 81, taps=("tap0", "tap1")) as net:
        srv = c.cm(net, "cm-server", "rping", "-s", "-P", "-C", "0", ip="10.99.81.3/24", tap="tap1")
        srv.wait_for("listening")
        net.wait_link_up(taps=("tap1",))
        base = [c.bin, "rping", "-c", "-a", "10.99.81.3", "-C", "0", "--settle", "0", "--tap", "tap0",
                "--ip", "10.99.81.2/24"]
        for extra, want in (([], True), (["--no-progress"], False)):
            p, master = interop_test.start_on_tty(net, base + extra)
            try:
                term = interop_test.read_tty(master, p, 1.5)
                p.send_signal(signal.SIGINT)
                term += interop_test.read_tty(master, p, 10)
                check(p.wait(timeout=10) == 130, "client %s: exit %s" % (extra, p.returncode))
                summary = re.search(r" rping .* iterations=(\d+)", p.stdout.read())
                check(summary and int(summary.group(1)) > 0, "client %s ran no iteration" % extra)
            finally:
                interop_test.end_on_tty(p, master)
            shown = re.findall(r"\rrping: (\d+) iterations, \d+/s, [0-9.]+ s", term)
            print("  %s: %d redraws, last %s; %r" % (extra or "default", len(shown), shown[-1:], term[-120:]))
            if want:
                check(len(shown) >= 3 and int(shown[-1]) > int(shown[0]), "progress on the terminal: %r" % term[-300:])
            else:
                check(not shown and "\r" not in term, "--no-progress drew: %r" % term[-300:])
        # The server's stderr is a pipe: no progress line.
        srv.p.send_signal(signal.SIGINT)
        srv.finish(30)
        check("\r" not in srv.stderr and "iterations," not in srv.stderr, "server on a pipe: %r" % srv.stderr[:300])


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


if __name__ == "__main__":
    sys.exit(interop_test.main(CASES, __doc__))
