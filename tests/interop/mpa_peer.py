#!/usr/bin/env python3
"""A small MPA peer over kernel TCP sockets, for the interop tests.

Read first: RFC 5044 section 7.1 (request / reply frame), RFC 6581 sections
5-7 (revision 2: the IRD/ORD word, peer-to-peer, RTR), docs/design.md "MPA facts"
(the 0x10 enhanced flag, the CRC32c least-significant byte first).

  mpa_peer.py client --to ADDR:PORT [--from-port P] [--rev 1|2] [--pdata T] [--p2p [--rtr send|write|read]
                     [--rtr-stag N] [--rtr-to N]] [--crc] [--tos N] [--close graceful|rst]
                     [--send-bytes N [--corrupt-at I]] [--expect-bytes N [--read-pause S]]
  mpa_peer.py server --bind ADDR:PORT [--pdata T] [--reject] [--p2p] [--crc]
                     [--tos N] [--close graceful|rst|wait|linger] [--count N]
                     [--send-bytes N [--corrupt-at I]] [--expect-bytes N [--read-pause S]]
                     [--keepalive IDLE,INTERVAL,COUNT]

--from-port binds the client's socket to that local port before it connects
(a test that needs a 4-tuple of its choosing).
--rtr offers only that RTR type (RFC 6581: B for send in the IRD word, C for
write and D for read in the ORD word) and sends it with --rtr-stag and
--rtr-to as its STag(s) and tagged offset(s). --tos sets IP_TOS (IPv6:
IPV6_TCLASS) on the socket before it connects or listens.

--send-bytes and --expect-bytes: after the MPA exchange (and the RTR) the
socket carries a byte stream, as iwarp-cm's options of the same names make
it (tools/pattern.hpp, docs/cli.md "Byte streams"): N bytes of our pattern go out
while N bytes of the other side's are read, both at once, both hashed with
SHA-256; a "stream" line tells what went and came. Then --close as usual.
--corrupt-at I flips byte I of what we send (to see the other side notice).
--read-pause S: the reader starts S seconds late (a reader that stops reading:
the receive buffer fills and the kernel advertises a zero window).
--keepalive IDLE,INTERVAL,COUNT turns on the kernel's keepalive on the
server's connection (seconds idle, seconds between probes, probes unanswered
before the kernel gives the connection up with ETIMEDOUT).

Every step prints one JSON object per line; errors end with exit code 1.
"""
import argparse
import hashlib
import json
import socket
import struct
import sys
import threading
import time

REQ_KEY = b"MPA ID Req Frame"
REP_KEY = b"MPA ID Rep Frame"
F_MARKERS, F_CRC, F_REJECT, F_ENHANCED = 0x80, 0x40, 0x20, 0x10
A_P2P, B_SEND = 0x8000, 0x4000
C_WRITE, D_READ = 0x8000, 0x4000  # the ORD word's RTR bits
# Zero-length SEND RTR ULPDU (RFC 5041 untagged header): last + DDP v1,
# RDMAP v1 Send, reserved, QN 0, MSN 1, MO 0.
RTR_SEND = bytes([0x41, 0x43]) + struct.pack(">IIII", 0, 0, 1, 0)


def _crc_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC_TABLE = _crc_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def say(**fields):
    print(json.dumps(fields), flush=True)


def endpoint(text):
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return family, (host, int(port))


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("peer closed after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return buf


def build_frame(key, rev, flags, pdata, v2word):
    body = (struct.pack(">HH", *v2word) if v2word else b"") + pdata
    return key + struct.pack(">BBH", flags, rev, len(body)) + body


def read_frame(sock, key):
    head = recv_exact(sock, 20)
    if head[:16] != key:
        raise ValueError("bad key %r" % head[:16])
    flags, rev, length = struct.unpack(">BBH", head[16:20])
    body = recv_exact(sock, length)
    out = {"flags": flags, "rev": rev, "crc": bool(flags & F_CRC), "reject": bool(flags & F_REJECT),
           "p2p": False, "rtr_send": False, "ird": None, "ord": None}
    if flags & F_ENHANCED and length >= 4:
        ird, ord_ = struct.unpack(">HH", body[:4])
        out.update(ird=ird & 0x3FFF, ord=ord_ & 0x3FFF, p2p=bool(ird & A_P2P), rtr_send=bool(ird & B_SEND),
                   rtr_write=bool(ord_ & C_WRITE), rtr_read=bool(ord_ & D_READ))
        body = body[4:]
    out["pdata"] = body.decode("latin-1")
    return out


def read_rtr_response(sock):
    """A READ RTR is a Read Request: the responder answers it with a zero-length Read
    Response to its sink (RFC 5040 section 4.5): 20 bytes, ULPDU length 14, tagged and last
    (0xC1), RDMAP Read Response (0x42), the sink STag and tagged offset, the CRC field."""
    fpdu = recv_exact(sock, 20)
    ulen, ddp, rdmap, stag, to = struct.unpack(">HBBIQ", fpdu[:16])
    say(event="rtr_read_response", length=ulen, ddp="0x%02x" % ddp, rdmap="0x%02x" % rdmap, stag=stag,
        to="0x%x" % to, raw=fpdu.hex())
    if (ulen, ddp, rdmap) != (14, 0xC1, 0x42):
        raise ValueError("not a zero-length Read Response: %s" % fpdu.hex())


def rtr_ulpdu(kind, stag, to):
    """The zero-length RTR ULPDU of `kind` (RFC 5041 section 4, RFC 5040 section 4)."""
    if kind == "write":
        # Tagged header: tagged + last + DDP v1, RDMAP v1 Write, STag, tagged offset.
        return bytes([0xC1, 0x40]) + struct.pack(">IQ", stag, to)
    if kind == "read":
        # Untagged header on queue 1 (MSN 1, MO 0), then sink STag and offset,
        # read size 0, source STag and offset.
        return bytes([0x41, 0x41]) + struct.pack(">IIII", 0, 1, 1, 0) + \
            struct.pack(">IQIIQ", stag, to, 0, stag, to)
    return RTR_SEND


def send_rtr(sock, crc, kind="send", stag=1, to=0):
    ulpdu = rtr_ulpdu(kind, stag, to)
    fpdu = struct.pack(">H", len(ulpdu)) + ulpdu
    fpdu += b"\0" * (-len(fpdu) % 4)
    sock.sendall(fpdu + struct.pack("<I", crc32c(fpdu) if crc else 0))


def read_rtr(sock, crc):
    (ulen,) = struct.unpack(">H", recv_exact(sock, 2))
    rest = recv_exact(sock, ulen + (-(2 + ulen) % 4) + 4)
    fpdu = struct.pack(">H", ulen) + rest[:-4]
    (got,) = struct.unpack("<I", rest[-4:])
    ulpdu = rest[:ulen]
    kind = {0x43: "send", 0x40: "write", 0x41: "read"}.get(ulpdu[1] if len(ulpdu) > 1 else -1, "other")
    return {"type": kind, "crc_ok": (got == crc32c(fpdu)) if crc else (got == 0)}


# The byte pattern (tools/pattern.hpp): block k of BLOCK bytes is k as 8
# big-endian bytes, then byte j is (k + j + tag) mod 256. The client
# (initiator) sends TAG_INITIATOR, the server TAG_RESPONDER.
BLOCK = 4096
TAG_INITIATOR, TAG_RESPONDER = 0x43, 0x53
CHUNK = 256 * 1024
_BODIES = {}  # tag -> the 256 block bodies (they repeat every 256 blocks)


def pattern_bytes(tag, offset, n):
    """The n bytes at `offset` of the stream with this tag."""
    if tag not in _BODIES:
        base = bytes((tag + x) % 256 for x in range(BLOCK + 256))
        _BODIES[tag] = [base[r + 8:r + BLOCK] for r in range(256)]
    bodies = _BODIES[tag]
    first, last = offset // BLOCK, (offset + n + BLOCK - 1) // BLOCK
    parts = []
    for k in range(first, last):
        parts += (k.to_bytes(8, "big"), bodies[k % 256])
    skip = offset - first * BLOCK
    return b"".join(parts)[skip:skip + n]


def first_mismatch(got, want):
    return next(i for i in range(len(want)) if i >= len(got) or got[i] != want[i])


def stream(sock, a, initiator):
    """Sends a.send_bytes of our pattern from a thread while reading
    a.expect_bytes of the peer's; reports counts, SHA-256s and the check."""
    send_tag, expect_tag = (TAG_INITIATOR, TAG_RESPONDER) if initiator else (TAG_RESPONDER, TAG_INITIATOR)
    out = {"sent": 0, "send_error": None}
    sent_hash = hashlib.sha256()

    def sender():
        try:
            while out["sent"] < a.send_bytes:
                chunk = pattern_bytes(send_tag, out["sent"], min(CHUNK, a.send_bytes - out["sent"]))
                if 0 <= a.corrupt_at - out["sent"] < len(chunk):
                    at = a.corrupt_at - out["sent"]
                    chunk = chunk[:at] + bytes([chunk[at] ^ 0xFF]) + chunk[at + 1:]
                sock.sendall(chunk)
                sent_hash.update(chunk)
                out["sent"] += len(chunk)
        except OSError as e:
            out["send_error"] = "%s: %s" % (type(e).__name__, e)

    start = time.monotonic()
    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    if a.read_pause:
        # A reader that stops reading: the receive buffer fills and the window closes.
        time.sleep(a.read_pause)
    got, mismatch, recv_error = 0, None, None
    recv_hash = hashlib.sha256()
    buf = bytearray(CHUNK)
    try:
        while got < a.expect_bytes:
            n = sock.recv_into(buf, min(len(buf), a.expect_bytes - got))
            if n == 0:
                break
            view = memoryview(buf)[:n]
            recv_hash.update(view)
            want = pattern_bytes(expect_tag, got, n)
            if mismatch is None and view != want:
                mismatch = got + first_mismatch(view, want)
            got += n
    except OSError as e:
        recv_error = "%s: %s" % (type(e).__name__, e)
    thread.join()
    took = max(time.monotonic() - start, 1e-9)
    say(event="stream", sent=out["sent"], sent_sha256=sent_hash.hexdigest(), received=got,
        received_sha256=recv_hash.hexdigest(), expected=a.expect_bytes,
        verified=mismatch is None and got == a.expect_bytes, mismatch_at=mismatch,
        seconds=round(took, 3), send_mbyte_s=round(out["sent"] / took / 1e6, 1),
        recv_mbyte_s=round(got / took / 1e6, 1), send_error=out["send_error"], recv_error=recv_error)


TCP_CLOSE = 7  # tcp_states.h; the first byte of struct tcp_info is the state


def wait_tcp_close(sock, timeout=15):
    """Polls the socket's TCP state until a reset has closed it (bounded)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] == TCP_CLOSE:
            return True
        time.sleep(0.02)
    return False


def finish(sock, how):
    """graceful: our FIN first, then the peer's; rst: abort; wait: the peer's FIN first;
    linger: the peer's FIN, then wait (without closing) for the peer's reset."""
    result = {"how": how, "peer_eof": False, "reset_by_peer": False}
    try:
        if how == "rst":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif how == "graceful":
            sock.shutdown(socket.SHUT_WR)
            result["peer_eof"] = sock.recv(1) == b""
        elif how == "linger":
            # The peer's FIN, then no close from us: only a reset ends it.
            result["peer_eof"] = sock.recv(1) == b""
            result["reset_by_peer"] = wait_tcp_close(sock)
        else:
            result["peer_eof"] = sock.recv(1) == b""
    except ConnectionResetError:
        result["reset_by_peer"] = True
    sock.close()
    say(event="closed", **result)


def set_tos(sock, family, tos):
    if tos is None:
        return
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, tos)
    else:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)


def rtr_word_bits(a):
    """The RTR bits of the IRD and ORD words the client offers."""
    if not a.p2p:
        return 0, 0
    return A_P2P | (B_SEND if a.rtr == "send" else 0), \
        {"write": C_WRITE, "read": D_READ}.get(a.rtr, 0)


def client(a):
    family, addr = endpoint(a.to)
    sock = socket.socket(family, socket.SOCK_STREAM)
    set_tos(sock, family, a.tos)
    sock.settimeout(a.timeout)
    if a.from_port:
        sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", a.from_port))
    start = time.monotonic()  # the reply's "seconds": from our SYN on
    sock.connect(addr)
    say(event="connected", local=str(sock.getsockname()), remote=a.to)
    flags = (F_CRC if a.crc else 0) | (F_ENHANCED if a.rev == 2 else 0)
    ird_bits, ord_bits = rtr_word_bits(a)
    word = (a.ird | ird_bits, a.ord | ord_bits) if a.rev == 2 else None
    sock.sendall(build_frame(REQ_KEY, a.rev, flags, a.pdata.encode(), word))
    rep = read_frame(sock, REP_KEY)
    say(event="reply", seconds=round(time.monotonic() - start, 6), **rep)
    if rep["reject"]:
        finish(sock, "wait")
        return
    if a.p2p and rep["p2p"]:
        send_rtr(sock, a.crc or rep["crc"], a.rtr, a.rtr_stag, a.rtr_to)
        say(event="rtr_sent", type=a.rtr, stag=a.rtr_stag, to=a.rtr_to, crc=a.crc or rep["crc"])
        if a.rtr == "read":
            read_rtr_response(sock)
    if a.send_bytes or a.expect_bytes:
        stream(sock, a, True)
    finish(sock, a.close)


def set_keepalive(sock, spec):
    """--keepalive IDLE,INTERVAL,COUNT (seconds, seconds, probes): the kernel's keepalive
    on the connection (tcp(7) TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT)."""
    if not spec:
        return
    idle, intvl, cnt = (int(v) for v in spec.split(","))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, intvl)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, cnt)


def server(a):
    family, addr = endpoint(a.bind)
    lsock = socket.socket(family, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    set_tos(lsock, family, a.tos)
    lsock.bind(addr)
    lsock.listen(8)
    lsock.settimeout(a.timeout)
    say(event="listening", bind=a.bind)
    for _ in range(a.count):
        sock, peer = lsock.accept()
        sock.settimeout(a.timeout)
        set_keepalive(sock, a.keepalive)
        say(event="accepted", remote=str(peer))
        req = read_frame(sock, REQ_KEY)
        say(event="request", **req)
        crc = req["crc"] or a.crc
        flags = (F_CRC if crc else 0) | (F_REJECT if a.reject else 0) | (F_ENHANCED if req["rev"] == 2 else 0)
        p2p = a.p2p and req["p2p"] and req["rtr_send"] and not a.reject
        word = ((a.ird | (A_P2P | B_SEND if p2p else 0)), a.ord) if req["rev"] == 2 else None
        sock.sendall(build_frame(REP_KEY, req["rev"], flags, a.pdata.encode(), word))
        say(event="reply_sent", reject=a.reject, p2p=p2p, crc=crc)
        if p2p:
            say(event="rtr", **read_rtr(sock, crc))
        if not a.reject and (a.send_bytes or a.expect_bytes):
            stream(sock, a, False)
        finish(sock, "graceful" if a.reject else a.close)
    lsock.close()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    for name in ("client", "server"):
        s = sub.add_parser(name)
        s.add_argument("--rev", type=int, default=2, choices=(1, 2))
        s.add_argument("--pdata", default="")
        s.add_argument("--p2p", action="store_true")
        s.add_argument("--crc", action="store_true")
        s.add_argument("--ird", type=int, default=1)
        s.add_argument("--ord", type=int, default=1)
        s.add_argument("--timeout", type=float, default=20)
        s.add_argument("--close", default="graceful", choices=("graceful", "rst", "wait", "linger"))
        s.add_argument("--tos", type=lambda v: int(v, 0), default=None)
        s.add_argument("--send-bytes", type=int, default=0)
        s.add_argument("--expect-bytes", type=int, default=0)
        s.add_argument("--corrupt-at", type=int, default=-1)
        s.add_argument("--read-pause", type=float, default=0, metavar="SECONDS")
    sub.choices["client"].add_argument("--to", required=True)
    sub.choices["client"].add_argument("--from-port", type=int, default=0)
    sub.choices["client"].add_argument("--rtr", default="send", choices=("send", "write", "read"))
    sub.choices["client"].add_argument("--rtr-stag", type=lambda v: int(v, 0), default=1)
    sub.choices["client"].add_argument("--rtr-to", type=lambda v: int(v, 0), default=0)
    sub.choices["server"].add_argument("--bind", required=True)
    sub.choices["server"].add_argument("--reject", action="store_true")
    sub.choices["server"].add_argument("--keepalive", default="", metavar="IDLE,INTERVAL,COUNT")
    sub.choices["server"].add_argument("--count", type=int, default=1)
    a = p.parse_args()
    try:
        client(a) if a.mode == "client" else server(a)
    except (OSError, EOFError, ValueError) as e:
        say(event="error", error="%s: %s" % (type(e).__name__, e))
        sys.exit(1)


if __name__ == "__main__":
    main()
