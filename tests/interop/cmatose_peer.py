#!/usr/bin/env python3
"""The client side of rdma-core's ucmatose over a kernel TCP socket, reading its
MPA reply as Linux siw's initiator reads it (python3 stdlib only).

Read first: rping_peer.py (the FPDU framing, DDP and RDMAP used here),
rdma-core's librdmacm/examples/cmatose.c, and Linux's
drivers/infiniband/sw/siw/siw_cm.c (siw_recv_mpa_rr).

  cmatose_peer.py --to ADDR:PORT [-C COUNT] [-S SIZE] [--settle SECONDS] [--timeout SECONDS]

siw reads the 20-byte header of its MPA reply, then the private data with room
for 4 bytes more and without waiting (MSG_DONTWAIT): a byte past the reply that
is already in the socket is "extra data", and siw ends the connection (-EPROTO).
So the responder must not send an FPDU right behind its reply (RFC 5044
section 7.1: not before the initiator's first). siw's connection manager reads
the reply from a work queue, on a slow machine some time after it arrived:
--settle (0.02 s) is that time, between the header and the rest.

We ask for MPA revision 2 with the enhanced flag and IRD/ORD 1/1, without
peer-to-peer mode and without CRC, as siw does by default. Then, as cmatose's
client does: the server's COUNT Sends of SIZE bytes (10 and 100, cmatose's
defaults) arrive with MSNs 1..COUNT, we send COUNT Sends of SIZE bytes back,
the server closes first and we close after it. One JSON line per step, as
mpa_peer.py prints them; exit 0 only when all of it went so.
"""
import argparse
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mpa_peer import F_ENHANCED, F_REJECT, REP_KEY, REQ_KEY, build_frame, endpoint, recv_exact, say  # noqa: E402
from rping_peer import (OP_SEND, QN_SEND, Fpdu, PeerError, Rdma, close_graceful,  # noqa: E402
                        exit_with, max_fpdu)


def read_reply_as_siw(sock, settle):
    """siw_recv_mpa_rr: the header, then (later) the private data and at most 4 bytes
    more without waiting; more than the private data is a protocol error."""
    head = recv_exact(sock, 20)
    if head[:16] != REP_KEY:
        raise PeerError("bad reply key %r" % head[:16])
    flags, rev, pd_len = struct.unpack(">BBH", head[16:20])
    time.sleep(settle)
    try:
        got = sock.recv(pd_len + 4, socket.MSG_DONTWAIT)
    except BlockingIOError:
        got = b""
    if len(got) > pd_len:
        say(event="extra_data", private_data=pd_len, bytes_after=len(got) - pd_len)
        raise PeerError("%d bytes after the MPA reply (siw: peer sent extra data, -EPROTO)"
                        % (len(got) - pd_len))
    pdata = got + recv_exact(sock, pd_len - len(got))
    ird = ord_ = None
    if flags & F_ENHANCED and pd_len >= 4:
        ird, ord_ = (x & 0x3FFF for x in struct.unpack(">HH", pdata[:4]))
    say(event="mpa_reply", rev=rev, reject=bool(flags & F_REJECT), ird=ird, ord=ord_,
        read_after_s=settle, extra_bytes=0)
    if flags & F_REJECT:
        raise PeerError("MPA reply with R=1")
    if rev != 2 or not flags & F_ENHANCED or ird is None:
        raise PeerError("not an enhanced revision-2 reply: flags 0x%02x rev %d" % (flags, rev))


def run(a):
    family, addr = endpoint(a.to)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(a.timeout)
    sock.connect(addr)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    say(event="connected", local=str(sock.getsockname()), remote=a.to)
    sock.sendall(build_frame(REQ_KEY, 2, F_ENHANCED, b"", (1, 1)))
    read_reply_as_siw(sock, a.settle)
    rdma = Rdma(Fpdu(sock, False, max_fpdu(a, sock), 0))
    rdma.rx_msn = {QN_SEND: 1}  # every Send's MSN checked, from 1
    for i in range(a.count):
        body = rdma.expect_send("message %d of %d" % (i + 1, a.count))
        if len(body) != a.size:
            raise PeerError("message %d: %d bytes, expected %d" % (i + 1, len(body), a.size))
    say(event="received", messages=a.count, size=a.size)
    for i in range(a.count):
        rdma.send_untagged(OP_SEND, QN_SEND, bytes([i & 0xFF]) * a.size)
    say(event="sent", messages=a.count, size=a.size)
    closed = close_graceful(sock, False)
    ok = closed["peer_eof"] and not closed["reset_by_peer"] and closed["trailing_bytes"] == 0
    say(event="done", ok=ok)
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--to", required=True, metavar="ADDR:PORT")
    p.add_argument("-C", dest="count", type=int, default=10)
    p.add_argument("-S", dest="size", type=int, default=100)
    p.add_argument("--settle", type=float, default=0.02, metavar="SECONDS")
    p.add_argument("--timeout", type=float, default=20, metavar="SECONDS")
    a = p.parse_args()
    a.mss = 0  # rping_peer.max_fpdu: the socket's TCP_MAXSEG
    if a.count < 1 or not 1 <= a.size <= 65535:
        p.error("-C must be at least 1 and -S 1..65535")
    exit_with(run, a)


if __name__ == "__main__":
    main()
