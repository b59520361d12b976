#!/usr/bin/env python3
"""An rping-compatible iWARP peer over a kernel TCP socket (python3 stdlib only).

Read first: mpa_peer.py (the MPA request/reply, the CRC32c, the JSON lines),
RFC 5044 section 4 (FPDU framing), RFC 5041 section 4 (DDP tagged and untagged
headers), RFC 5040 section 4 (RDMAP opcodes, Read Request, Terminate).

  rping_peer.py server --bind ADDR:PORT [-C N] [-S SIZE] [-V] [--crc] [faults]
  rping_peer.py client --to ADDR:PORT   [-C N] [-S SIZE] [-V] [--crc] [faults]
  faults: [--corrupt-crc K] [--read-extra N] [--mss N]; client: [--settle SECONDS]
  peer-to-peer: server [--p2p]; client [--rtr send|write|read]
  close faults: [--send-terminate K] [--truncate K] [--stall-after K] [--rcvbuf BYTES] [--no-close]
                [--hold SECONDS]

rping peer. It plays either side of rdma-core's `rping` data exchange
without RDMA hardware: MPA revision 2 with the enhanced flag and an IRD/ORD
word of 1/1 (no peer-to-peer, as siw's defaults), CRC asked for by --crc (the
field is always there, zero when off; as the initiator we ask, as the responder
we follow the request or insist with --crc). Each FPDU is one send() with
TCP_NODELAY and at most the MSS (TCP_MAXSEG, capped at 1460, or --mss) bytes;
longer messages go as several DDP segments. FPDUs are reassembled across
recv() boundaries. Per iteration, as rping does:

  client Send {start buffer TO u64, STag u32, size u32} (big-endian, 16 bytes)
  server RDMA Read Request of the whole start buffer -> client Read Response
  server Send (16 bytes, the go-ahead)
  client Send {sink buffer TO, STag, size}
  server RDMA Write of strlen(data)+1 bytes into the sink
  server Send (16 bytes, done)

The client fills the start buffer as rping does ("rdma-ping-%d: " then letters
'A'..'z' rotating, starting one later each iteration, NUL last) and with -V
checks that the sink holds the same bytes. The server with -V checks that what
it read is that pattern. -C N: the client runs N iterations; the server
expects N and then the peer's close (0: any number until the close). Then a
graceful close (our FIN, then the peer's). Exit 0 only when all went well.

The client waits --settle seconds (0.5) after the MPA reply before its first
FPDU: siw as the responder (Linux 6.1, siw_accept) sends the reply and only
then hands the socket's receive callback to the QP, so an FPDU arriving in
between is left in the socket, unprocessed, until more data arrives (with
--settle 0 against a slow guest the first Send was stranded for good).

Faults, to see what the other side does: --corrupt-crc K spoils the CRC of the
K-th FPDU we send (with --crc); --read-extra N (server) reads N bytes more than
the client advertised. A received Terminate is printed ("terminate"), then we
wait (up to --timeout) for the peer to close first, and exit 1.

Close faults, to see how the other side ends a connection (FaultFpdu,
hold_open): --send-terminate K sends a Terminate (RDMAP, remote operation
error, catastrophic to the stream; RFC 5040 section 4.8) in place of the K-th FPDU, then waits
for the peer's FIN and closes ("terminate_sent", then "closed"); exit 1.
--truncate K sends the first half of the K-th FPDU, then our FIN ("truncated").
--stall-after K stops reading for good after K FPDUs received (with
--rcvbuf, a small SO_RCVBUF set before the handshake, the window closes
soon); --no-close (server) reads the peer's FIN after the iterations and
never closes or shuts down. Both then hold the socket up to --hold seconds
(20), watching the kernel's state of it (TCP_INFO) until it leaves
ESTABLISHED / CLOSE_WAIT, print "held" (tcp_state, reset) and exit 1 (the
peer had to end the connection).
Every step prints one JSON object per line, like mpa_peer.py.

Peer-to-peer (RFC 6581 section 6), as the drivers do it (docs/design.md, the RTR table):
  server --p2p plays irdma's responder: it requires the A bit, picks READ whenever it is
  offered (irdma_negotiate_mpa_v2_ird_ord tests the read bit first), else WRITE, else
  SEND, and answers a READ RTR with a zero-length Read Response to the RTR's sink, as
  any RDMAP responder answers a Read Request.
  client --rtr TYPE plays siw's initiator (siw_connect, siw_qp_mpa_rts): it offers that
  one type and sends it right after the reply: a zero-length Write (STag 1, TO 0), a
  zero-length Read Request (sink STag 0 and TO 0, source STag 1), or a zero-length Send.
  The READ RTR stays in its outstanding reads until its response comes, and with ORD 1
  that response must come before the client starts.
Both number MSNs as RFC 5041 section 5 says: the RTR is message 1 of its queue, and
both check every untagged message's MSN (a SEND RTR's sender's first real Send is 2).
"""
import argparse
import errno
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mpa_peer import (A_P2P, B_SEND, C_WRITE, D_READ, F_CRC, F_ENHANCED,  # noqa: E402
                      REP_KEY, REQ_KEY, build_frame, crc32c, endpoint, read_frame, recv_exact,
                      say)

# RDMAP opcodes (RFC 5040 section 4.3) and DDP queue numbers (section 5).
OP_WRITE, OP_READ_REQ, OP_READ_RESP, OP_SEND, OP_SEND_SE, OP_TERMINATE = 0, 1, 2, 3, 5, 7
QN_SEND, QN_READ, QN_TERMINATE = 0, 1, 2
DDP_TAGGED, DDP_LAST, DDP_VERSION, RDMAP_VERSION = 0x80, 0x40, 0x01, 0x40
UNTAGGED_HDR, TAGGED_HDR = 18, 14
RPING_INFO = struct.Struct(">QII")  # struct rping_rdma_info: buf, rkey, size
MSG_FMT = "rdma-ping-%d: "
MIN_SIZE, MAX_SIZE = 26, 65535  # rping's RPING_MIN_BUFSIZE and RPING_BUFSIZE - 1

# Our buffers' STags and tagged offsets (made up, like virtual addresses).
START_STAG, START_TO = 0x00C0FE01, 0x00007F0000100000
SINK_STAG, SINK_TO = 0x00C0FE02, 0x00007F0000200000
RDMA_STAG, RDMA_TO = 0x00C0FE03, 0x00007F0000300000


class PeerError(Exception):
    pass


class Terminated(PeerError):
    """The peer sent a Terminate message."""


class Held(PeerError):
    """A close fault held the socket until the peer ended the connection (or --hold passed)."""


def ping_pattern(ping, size):
    """The bytes rping's client puts in its start buffer for iteration `ping`."""
    head = (MSG_FMT % ping).encode()[:size]
    out = bytearray(head)
    c = 65 + ping % 58  # 'A' .. 'z' is 58 letters; the start moves one per ping
    while len(out) < size:
        out.append(c)
        c = 65 if c >= 122 else c + 1
    out[size - 1] = 0
    return bytes(out)


class Fpdu:
    """MPA framing over the socket: one FPDU per send(), reassembly on receive."""

    def __init__(self, sock, crc, max_fpdu, corrupt_at):
        self.sock, self.crc, self.max_fpdu, self.corrupt_at = sock, crc, max_fpdu, corrupt_at
        self.sent = 0
        self.received = 0
        self.largest_in = 0  # the largest FPDU the peer sent
        self.rx = bytearray()

    def max_ulpdu(self):
        """The largest ULPDU whose FPDU (length, ULPDU, pad, CRC) fits max_fpdu."""
        return ((self.max_fpdu - 4) & ~3) - 2

    def frame(self, ulpdu):
        """The FPDU of one ULPDU (counted as sent): length, ULPDU, pad, CRC."""
        fpdu = struct.pack(">H", len(ulpdu)) + ulpdu
        fpdu += b"\0" * (-len(fpdu) % 4)
        crc = crc32c(fpdu) if self.crc else 0
        self.sent += 1
        if self.sent == self.corrupt_at:
            crc ^= 0x1
            say(event="corrupted_crc", fpdu=self.sent, length=len(fpdu) + 4)
        return fpdu + struct.pack("<I", crc)

    def send(self, ulpdu):
        self.sock.sendall(self.frame(ulpdu))

    def _fill(self, n):
        while len(self.rx) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("peer closed with %d bytes of an FPDU" % len(self.rx))
            self.rx += chunk

    def recv(self):
        """The next ULPDU; EOFError at a clean end of stream between FPDUs."""
        if not self.rx:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("")
            self.rx += chunk
        self._fill(2)
        (ulen,) = struct.unpack(">H", self.rx[:2])
        total = 2 + ulen + (-(2 + ulen) % 4) + 4
        self._fill(total)
        fpdu, self.rx = bytes(self.rx[:total]), self.rx[total:]
        (got,) = struct.unpack("<I", fpdu[-4:])
        want = crc32c(fpdu[:-4]) if self.crc else 0
        self.received += 1
        self.largest_in = max(self.largest_in, total)
        if got != want:
            raise PeerError("FPDU %d: CRC 0x%08x, expected 0x%08x" % (self.received, got, want))
        return fpdu[2:2 + ulen]


# The kernel's TCP states (include/net/tcp_states.h) as TCP_INFO's first byte gives them.
TCP_STATES = {1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
              6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING"}


def tcp_state(sock):
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]


def hold_open(sock, hold, why):
    """Keeps the socket, never closing it and reading nothing, until the kernel's
    state of it leaves ESTABLISHED and CLOSE_WAIT (the peer reset it) or `hold`
    seconds pass; reports what the kernel says and raises Held."""
    say(event="holding", why=why, tcp_state=TCP_STATES.get(tcp_state(sock), "?"))
    end = time.monotonic() + hold
    state = tcp_state(sock)
    while state in (1, 8) and time.monotonic() < end:
        time.sleep(0.05)
        state = tcp_state(sock)
    # An RST sets ECONNRESET, or EPIPE in CLOSE_WAIT (Linux's tcp_reset).
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    say(event="held", why=why, tcp_state=TCP_STATES.get(state, str(state)),
        reset=err in (errno.ECONNRESET, errno.EPIPE), so_error=os.strerror(err) if err else None)
    raise Held("held the socket (%s) until %s" % (why, TCP_STATES.get(state, str(state))))


class FaultFpdu(Fpdu):
    """Fpdu with the close faults: a Terminate in place of the K-th FPDU sent
    (--send-terminate), the stream ended inside the K-th (--truncate), reading
    stopped after K FPDUs (--stall-after)."""

    def __init__(self, sock, crc, max_fpdu, a):
        super().__init__(sock, crc, max_fpdu, a.corrupt_crc)
        self.a = a

    def send(self, ulpdu):
        if self.a.send_terminate and self.sent + 1 == self.a.send_terminate:
            # Untagged, last, queue 2, MSN 1, MO 0; the Terminate Control: layer 0
            # (RDMAP) and type 2 (remote operation) in the first byte, code 7
            # (catastrophic error localized to the stream), no headers quoted.
            ctrl = bytes([0x02, 0x07, 0x00, 0x00])
            super().send(bytes([DDP_VERSION | DDP_LAST, RDMAP_VERSION | OP_TERMINATE]) +
                         struct.pack(">IIII", 0, QN_TERMINATE, 1, 0) + ctrl)
            say(event="terminate_sent", fpdu=self.sent, layer=0, etype=2, ecode=7)
            close_graceful(self.sock, False)
            raise Held("sent a Terminate")
        if self.a.truncate and self.sent + 1 == self.a.truncate:
            # Half of the FPDU, then our FIN: the stream ends inside it.
            whole = self.frame(ulpdu)
            self.sock.sendall(whole[:len(whole) // 2])
            self.sock.shutdown(socket.SHUT_WR)
            say(event="truncated", fpdu=self.sent, sent=len(whole) // 2, length=len(whole))
            close_graceful(self.sock, False)
            raise Held("ended the stream inside an FPDU")
        super().send(ulpdu)

    def recv(self):
        if self.a.stall_after and self.received >= self.a.stall_after:
            hold_open(self.sock, self.a.hold, "stalled after %d FPDUs" % self.received)
        return super().recv()


def set_rcvbuf(a, sock):
    """--rcvbuf before the handshake (an accepted socket inherits it): the window
    scale and the window follow it, so a peer that stops reading closes it soon."""
    if a.rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, a.rcvbuf)


def make_fpdu(a, sock, crc):
    if a.send_terminate or a.stall_after or a.truncate:
        return FaultFpdu(sock, crc, max_fpdu(a, sock), a)
    return Fpdu(sock, crc, max_fpdu(a, sock), a.corrupt_crc)


def parse_ddp(ulpdu):
    if len(ulpdu) < 2:
        raise PeerError("ULPDU of %d bytes" % len(ulpdu))
    ddp, rdmap = ulpdu[0], ulpdu[1]
    seg = {"tagged": bool(ddp & DDP_TAGGED), "last": bool(ddp & DDP_LAST), "op": rdmap & 0x0F}
    if ddp & 0x03 != DDP_VERSION or rdmap & 0xC0 != RDMAP_VERSION:
        raise PeerError("DDP/RDMAP control 0x%02x 0x%02x" % (ddp, rdmap))
    if seg["tagged"]:
        seg["stag"], seg["to"] = struct.unpack(">IQ", ulpdu[2:TAGGED_HDR])
        seg["data"] = ulpdu[TAGGED_HDR:]
    else:
        _, seg["qn"], seg["msn"], seg["mo"] = struct.unpack(">IIII", ulpdu[2:UNTAGGED_HDR])
        seg["data"] = ulpdu[UNTAGGED_HDR:]
    return seg


def describe_terminate(body):
    """The fields of a Terminate message (RFC 5040 section 4.8: layer in the high
    nibble, M/D/R the top bits of the third byte). siw (Linux 6.1 on x86) fills
    them from little-endian bitfields: layer in the low nibble, M/D/R in bits 0-2;
    the siw_* fields read them that way."""
    if len(body) < 4:
        return {"raw": body.hex()}
    return {"layer": body[0] >> 4, "etype": body[0] & 0x0F, "ecode": body[1],
            "hdrct": body[2] >> 5, "siw_layer": body[0] & 0x0F, "siw_etype": body[0] >> 4,
            "siw_hdrct": body[2] & 0x7, "raw": body.hex()}


class Rdma:
    """DDP/RDMAP over an Fpdu: buffers by STag, untagged queues with MSNs."""

    def __init__(self, fpdu):
        self.fpdu = fpdu
        self.msn = {QN_SEND: 1, QN_READ: 1, QN_TERMINATE: 1}  # next to send
        self.buffers = {}  # stag -> [to, bytearray]
        self.partial = {}  # (qn, msn) -> bytearray
        self.reads_served = 0
        self.rx_msn = None  # {qn: next expected MSN} once peer-to-peer numbering is checked
        self.rtr_read_due = False  # our READ RTR waits for its zero-length Read Response

    def register(self, stag, to, size):
        self.buffers[stag] = [to, bytearray(size)]
        return self.buffers[stag][1]

    def send_untagged(self, op, qn, payload):
        msn = self.msn[qn]
        self.msn[qn] += 1
        room = self.fpdu.max_ulpdu() - UNTAGGED_HDR
        mo = 0
        while True:
            part = payload[mo:mo + room]
            last = mo + len(part) >= len(payload)
            ctrl = DDP_VERSION | (DDP_LAST if last else 0)
            self.fpdu.send(bytes([ctrl, RDMAP_VERSION | op]) +
                           struct.pack(">IIII", 0, qn, msn, mo) + part)
            mo += len(part)
            if last:
                return msn

    def send_tagged(self, op, stag, to, data):
        room = self.fpdu.max_ulpdu() - TAGGED_HDR
        off, segments = 0, 0
        while True:
            part = data[off:off + room]
            last = off + len(part) >= len(data)
            ctrl = DDP_TAGGED | DDP_VERSION | (DDP_LAST if last else 0)
            self.fpdu.send(bytes([ctrl, RDMAP_VERSION | op]) + struct.pack(">IQ", stag, to + off) + part)
            off += len(part)
            segments += 1
            if last:
                return segments

    def place(self, seg):
        if seg["stag"] not in self.buffers:
            raise PeerError("tagged segment for unknown STag 0x%08x" % seg["stag"])
        base, buf = self.buffers[seg["stag"]]
        at = seg["to"] - base
        if at < 0 or at + len(seg["data"]) > len(buf):
            raise PeerError("tagged segment outside STag 0x%08x: TO 0x%x len %d"
                            % (seg["stag"], seg["to"], len(seg["data"])))
        buf[at:at + len(seg["data"])] = seg["data"]

    def serve_read(self, body):
        sink_stag, sink_to, size, src_stag, src_to = struct.unpack(">IQIIQ", body[:28])
        say(event="read_request", sink_stag="0x%08x" % sink_stag, sink_to="0x%x" % sink_to,
            size=size, source_stag="0x%08x" % src_stag, source_to="0x%x" % src_to)
        if src_stag not in self.buffers:
            raise PeerError("Read Request for unknown STag 0x%08x" % src_stag)
        base, buf = self.buffers[src_stag]
        at = src_to - base
        if at < 0 or at + size > len(buf):
            raise PeerError("Read Request outside STag 0x%08x" % src_stag)
        segments = self.send_tagged(OP_READ_RESP, sink_stag, sink_to, bytes(buf[at:at + size]))
        self.reads_served += 1
        say(event="read_response_sent", size=size, segments=segments)

    def next_event(self):
        """Handles segments until a Send or a Read Response is whole; returns
        (opcode, payload). Read Requests are answered here; Writes are placed and
        reported when their last segment lands."""
        while True:
            seg = parse_ddp(self.fpdu.recv())
            if seg["tagged"] and seg["op"] == OP_READ_RESP and self.rtr_read_due:
                take_rtr_read_response(self, seg)
                continue
            if not seg["tagged"]:
                check_rx_msn(self, seg)
            if seg["tagged"]:
                self.place(seg)
                if seg["last"] and seg["op"] == OP_READ_RESP:
                    return seg["op"], seg
                if seg["last"]:
                    say(event="write_landed", stag="0x%08x" % seg["stag"], last_to="0x%x" % seg["to"])
                continue
            part = self.partial.setdefault((seg["qn"], seg["msn"]), bytearray())
            if seg["mo"] != len(part):
                raise PeerError("untagged MO %d, expected %d" % (seg["mo"], len(part)))
            part += seg["data"]
            if not seg["last"]:
                continue
            body = bytes(self.partial.pop((seg["qn"], seg["msn"])))
            if seg["op"] == OP_TERMINATE:
                say(event="terminate", qn=seg["qn"], msn=seg["msn"], **describe_terminate(body))
                raise Terminated("peer sent a Terminate")
            if seg["op"] == OP_READ_REQ:
                self.serve_read(body)
                continue
            say(event="recv", op=seg["op"], qn=seg["qn"], msn=seg["msn"], length=len(body))
            return seg["op"], body

    def expect_send(self, what):
        op, body = self.next_event()
        if op not in (OP_SEND, OP_SEND_SE):
            raise PeerError("expected a Send (%s), got opcode %d" % (what, op))
        return body


# ---- peer-to-peer (RFC 6581 section 6), apart from the rping exchange itself ----

RTR_BITS = {"send": ("ird", B_SEND), "write": ("ord", C_WRITE), "read": ("ord", D_READ)}


def check_rx_msn(rdma, seg):
    """RFC 5041 section 5: each untagged queue's messages come in MSN order from 1 (the
    RTR took 1 where there was one); siw_send_check_ntoh and siw_init_rresp check it."""
    if rdma.rx_msn is None or seg["qn"] not in rdma.rx_msn:
        return
    want = rdma.rx_msn[seg["qn"]]
    if seg["msn"] != want:
        say(event="msn_mismatch", qn=seg["qn"], msn=seg["msn"], expected=want)
        raise PeerError("queue %d: MSN %d, expected %d" % (seg["qn"], seg["msn"], want))
    if seg["last"]:
        rdma.rx_msn[seg["qn"]] = want + 1


def take_rtr_read_response(rdma, seg):
    """The answer to our READ RTR: zero-length, whole, to the sink we named (0, 0)."""
    if seg["stag"] != 0 or seg["to"] != 0 or seg["data"] or not seg["last"]:
        raise PeerError("RTR Read Response to STag 0x%08x TO 0x%x with %d bytes"
                        % (seg["stag"], seg["to"], len(seg["data"])))
    rdma.rtr_read_due = False
    say(event="rtr_read_response", stag=seg["stag"], to=seg["to"])


def p2p_accept(a, sock):
    """irdma's responder: the request must offer peer-to-peer; READ is picked whenever it
    is offered (irdma_negotiate_mpa_v2_ird_ord), else WRITE, else SEND. Returns (crc, type)."""
    req = read_frame(sock, REQ_KEY)
    say(event="mpa_request", **req)
    if req["rev"] != 2 or not req["p2p"]:
        raise PeerError("request without peer-to-peer (irdma refuses it: -EOPNOTSUPP)")
    kind = "read" if req["rtr_read"] else "write" if req["rtr_write"] else \
        "send" if req["rtr_send"] else None
    if kind is None:
        raise PeerError("request offers no RTR type")
    crc = req["crc"] or a.crc
    ird, ord_ = a.ird | A_P2P, a.ord
    word, bit = RTR_BITS[kind]
    if word == "ird":
        ird |= bit
    else:
        ord_ |= bit
    sock.sendall(build_frame(REP_KEY, 2, (F_CRC if crc else 0) | F_ENHANCED, b"", (ird, ord_)))
    say(event="mpa_reply_sent", crc=crc, ird=a.ird, ord=a.ord, rtr=kind)
    return crc, kind


def p2p_expect_rtr(rdma, kind):
    """The initiator's RTR, the first FPDU after our reply; a READ RTR is answered at once
    with a zero-length Read Response to its sink. Numbering starts after it."""
    seg = parse_ddp(rdma.fpdu.recv())
    rdma.rx_msn = {QN_SEND: 1, QN_READ: 1}
    if kind == "write":
        ok = seg["tagged"] and seg["op"] == OP_WRITE and not seg["data"] and seg["last"]
    else:
        qn, op = (QN_READ, OP_READ_REQ) if kind == "read" else (QN_SEND, OP_SEND)
        ok = not seg["tagged"] and seg["op"] == op and seg["qn"] == qn and seg["last"]
        want_len = 28 if kind == "read" else 0
        ok = ok and len(seg["data"]) == want_len and seg["mo"] == 0
        if ok:
            check_rx_msn(rdma, seg)
    if not ok:
        raise PeerError("expected a %s RTR, got %s" % (kind, {k: v for k, v in seg.items() if k != "data"}))
    say(event="rtr_received", type=kind, **({"stag": "0x%08x" % seg["stag"], "to": seg["to"]}
                                            if seg["tagged"] else {"qn": seg["qn"], "msn": seg["msn"]}))
    if kind == "read":
        sink_stag, sink_to, size, _, _ = struct.unpack(">IQIIQ", seg["data"])
        if size != 0:
            raise PeerError("READ RTR of %d bytes" % size)
        rdma.send_tagged(OP_READ_RESP, sink_stag, sink_to, b"")
        say(event="rtr_read_response_sent", sink_stag="0x%08x" % sink_stag, sink_to=sink_to)


def p2p_connect(a, sock):
    """siw's initiator (siw_connect): revision 2, enhanced, the A bit and the one RTR type
    of --rtr (siw offers WRITE and READ; one at a time here). Returns the CRC in use."""
    ird, ord_ = a.ird | A_P2P, a.ord
    word, bit = RTR_BITS[a.rtr]
    if word == "ird":
        ird |= bit
    else:
        ord_ |= bit
    sock.sendall(build_frame(REQ_KEY, 2, F_ENHANCED | (F_CRC if a.crc else 0), b"", (ird, ord_)))
    rep = read_frame(sock, REP_KEY)
    say(event="mpa_reply", **rep)
    if rep["reject"]:
        raise PeerError("MPA reply with R=1")
    picked = [k for k in ("send", "write", "read") if rep.get("rtr_" + k)]
    if not rep["p2p"] or picked != [a.rtr]:
        raise PeerError("reply picks %s (p2p %s), we offered only %s" % (picked, rep["p2p"], a.rtr))
    return rep["crc"] or a.crc


def p2p_send_rtr(a, rdma):
    """The RTR as siw_qp_mpa_rts builds it (rkey 1, raddr 0, lkey 0, laddr 0, length 0),
    right after the reply; the READ RTR goes into the outstanding reads. With ORD 1 the
    first real operation waits for its response (as siw's ORQ holds it)."""
    rdma.rx_msn = {QN_SEND: 1, QN_READ: 1}
    if a.rtr == "write":
        rdma.send_tagged(OP_WRITE, 1, 0, b"")
    elif a.rtr == "read":
        rdma.send_untagged(OP_READ_REQ, QN_READ, struct.pack(">IQIIQ", 0, 0, 0, 1, 0))
        rdma.rtr_read_due = True
    else:
        rdma.send_untagged(OP_SEND, QN_SEND, b"")
    say(event="rtr_sent", type=a.rtr, next_send_msn=rdma.msn[QN_SEND], next_read_msn=rdma.msn[QN_READ])
    if a.rtr == "read" and a.ord <= 1:
        wait_rtr_read_response(rdma)


def wait_rtr_read_response(rdma):
    """Our ORD is used up by the READ RTR: nothing starts before its response."""
    while rdma.rtr_read_due:
        seg = parse_ddp(rdma.fpdu.recv())
        if not (seg["tagged"] and seg["op"] == OP_READ_RESP):
            raise PeerError("waiting for the RTR's Read Response, got %s"
                            % {k: v for k, v in seg.items() if k != "data"})
        take_rtr_read_response(rdma, seg)


def mpa_connect(a, sock):
    flags = F_ENHANCED | (F_CRC if a.crc else 0)
    sock.sendall(build_frame(REQ_KEY, 2, flags, b"", (a.ird, a.ord)))
    rep = read_frame(sock, REP_KEY)
    say(event="mpa_reply", **rep)
    if rep["reject"]:
        raise PeerError("MPA reply with R=1")
    return rep["crc"] or a.crc


def mpa_accept(a, sock):
    req = read_frame(sock, REQ_KEY)
    say(event="mpa_request", **req)
    crc = req["crc"] or a.crc
    word = (a.ird, a.ord) if req["rev"] == 2 else None
    flags = (F_CRC if crc else 0) | (F_ENHANCED if req["rev"] == 2 else 0)
    sock.sendall(build_frame(REP_KEY, req["rev"], flags, b"", word))
    say(event="mpa_reply_sent", crc=crc, ird=a.ird, ord=a.ord)
    return crc


def max_fpdu(a, sock):
    if a.mss:
        return a.mss
    return min(1460, sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG))


def close_graceful(sock, first):
    """first: our FIN, then the peer's; otherwise the peer's FIN first, then ours."""
    result = {"first": "us" if first else "peer", "peer_eof": False, "reset_by_peer": False,
              "trailing_bytes": 0}
    try:
        if first:
            sock.shutdown(socket.SHUT_WR)
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                result["peer_eof"] = True
                break
            result["trailing_bytes"] += len(chunk)
    except ConnectionResetError:
        result["reset_by_peer"] = True
    except socket.timeout:
        result["timed_out"] = True
    sock.close()
    say(event="closed", **result)
    return result


def run_client(a, sock, rdma):
    start = rdma.register(START_STAG, START_TO, a.size)
    sink = rdma.register(SINK_STAG, SINK_TO, a.size)
    for ping in range(a.count):
        start[:] = ping_pattern(ping, a.size)
        sink[:] = bytes(a.size)
        reads_before = rdma.reads_served
        rdma.send_untagged(OP_SEND, QN_SEND, RPING_INFO.pack(START_TO, START_STAG, a.size))
        rdma.expect_send("go-ahead after the Read")
        if rdma.reads_served != reads_before + 1:
            raise PeerError("go-ahead without the Read of the start buffer")
        rdma.send_untagged(OP_SEND, QN_SEND, RPING_INFO.pack(SINK_TO, SINK_STAG, a.size))
        rdma.expect_send("done after the Write")
        ok = bytes(sink) == bytes(start)
        text = bytes(sink).split(b"\0")[0].decode("latin-1")
        say(event="ping", iteration=ping, verified=ok if a.validate else None, data=text[:64])
        if a.validate and not ok:
            raise PeerError("data mismatch in iteration %d" % ping)
    return close_graceful(sock, True)


def read_info(body):
    if len(body) != RPING_INFO.size:
        raise PeerError("rping info of %d bytes" % len(body))
    return RPING_INFO.unpack(body)


def serve_one(a, rdma, ping, info):
    to, stag, size = info
    need = size + a.read_extra
    buf = rdma.register(RDMA_STAG, RDMA_TO, max(a.size, need))
    say(event="info", iteration=ping, to="0x%x" % to, stag="0x%08x" % stag, size=size)
    rdma.send_untagged(OP_READ_REQ, QN_READ, struct.pack(">IQIIQ", RDMA_STAG, RDMA_TO, need,
                                                         stag, to))
    op, _ = rdma.next_event()
    if op != OP_READ_RESP:
        raise PeerError("expected the Read Response, got opcode %d" % op)
    data = bytes(buf[:size])
    ok = data == ping_pattern(ping, size)
    say(event="read_done", iteration=ping, verified=ok if a.validate else None,
        data=data.split(b"\0")[0].decode("latin-1")[:64])
    if a.validate and not ok:
        raise PeerError("read data of iteration %d is not rping's pattern" % ping)
    rdma.send_untagged(OP_SEND, QN_SEND, bytes(RPING_INFO.size))
    sink_to, sink_stag, _ = read_info(rdma.expect_send("sink advertisement"))
    length = data.index(0) + 1 if 0 in data else size
    segments = rdma.send_tagged(OP_WRITE, sink_stag, sink_to, data[:length])
    say(event="write_sent", iteration=ping, length=length, segments=segments)
    rdma.send_untagged(OP_SEND, QN_SEND, bytes(RPING_INFO.size))


def run_server(a, sock, rdma):
    ping = 0
    while not a.count or ping < a.count:
        try:
            body = rdma.expect_send("start advertisement")
        except EOFError:
            if a.count:
                raise PeerError("peer closed after %d of %d iterations" % (ping, a.count))
            break
        serve_one(a, rdma, ping, read_info(body))
        ping += 1
    if not ping:
        raise PeerError("no iteration")
    if a.no_close:
        hold_open(sock, a.hold, "never closing after %d iterations" % ping)
    return close_graceful(sock, False)


def run(a):
    family, addr = endpoint(a.to if a.mode == "client" else a.bind)
    if a.mode == "client":
        sock = socket.socket(family, socket.SOCK_STREAM)
        set_rcvbuf(a, sock)
        sock.settimeout(a.timeout)
        sock.connect(addr)
        say(event="connected", local=str(sock.getsockname()), remote=a.to)
    else:
        lsock = socket.socket(family, socket.SOCK_STREAM)
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.bind(addr)
        set_rcvbuf(a, lsock)
        lsock.listen(1)
        lsock.settimeout(a.timeout)
        say(event="listening", bind=a.bind)
        sock, peer = lsock.accept()
        lsock.close()
        sock.settimeout(a.timeout)
        say(event="accepted", remote=str(peer))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtr = None
    if a.mode == "client":
        crc = p2p_connect(a, sock) if a.rtr else mpa_connect(a, sock)
        rtr = a.rtr
    elif a.p2p:
        crc, rtr = p2p_accept(a, sock)
    else:
        crc = mpa_accept(a, sock)
    if a.mode == "client" and a.settle:
        # siw as the responder sends its reply before it hooks its receive path to the
        # socket; an FPDU landing in between sits unread until more data comes.
        time.sleep(a.settle)
    fpdu = make_fpdu(a, sock, crc)
    say(event="established", crc=crc, max_fpdu=fpdu.max_fpdu, max_ulpdu=fpdu.max_ulpdu())
    rdma = Rdma(fpdu)
    if rtr and a.mode == "client":
        p2p_send_rtr(a, rdma)
    elif rtr:
        p2p_expect_rtr(rdma, rtr)
    try:
        closed = run_client(a, sock, rdma) if a.mode == "client" else run_server(a, sock, rdma)
    except Terminated:
        # See how the peer ends the connection after its Terminate: we send nothing more.
        close_graceful(sock, False)
        raise
    say(event="done", iterations=a.count, fpdus_sent=fpdu.sent, fpdus_received=fpdu.received,
        largest_fpdu_received=fpdu.largest_in, reads_served=rdma.reads_served, rtr=rtr,
        rtr_read_due=rdma.rtr_read_due)
    if rdma.rtr_read_due:
        say(event="error", error="the READ RTR was never answered")
        return False
    return closed["peer_eof"] and not closed["reset_by_peer"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    for name in ("client", "server"):
        s = sub.add_parser(name)
        s.add_argument("-C", dest="count", type=int, default=1 if name == "client" else 0)
        s.add_argument("-S", dest="size", type=int, default=64)
        s.add_argument("-V", dest="validate", action="store_true")
        s.add_argument("--crc", action="store_true")
        s.add_argument("--ird", type=int, default=1)
        s.add_argument("--ord", type=int, default=1)
        s.add_argument("--mss", type=int, default=0, help="largest FPDU (default: TCP_MAXSEG, <= 1460)")
        s.add_argument("--corrupt-crc", type=int, default=0, metavar="K")
        s.add_argument("--timeout", type=float, default=30)
        s.add_argument("--send-terminate", type=int, default=0, metavar="K")
        s.add_argument("--stall-after", type=int, default=0, metavar="K")
        s.add_argument("--truncate", type=int, default=0, metavar="K")
        s.add_argument("--rcvbuf", type=int, default=0, metavar="BYTES")
        s.add_argument("--hold", type=float, default=20, metavar="SECONDS")
    sub.choices["client"].add_argument("--to", required=True)
    sub.choices["client"].add_argument("--settle", type=float, default=0.5, metavar="SECONDS",
                                       help="wait after the MPA reply before the first FPDU")
    sub.choices["server"].add_argument("--bind", required=True)
    sub.choices["server"].add_argument("--read-extra", type=int, default=0, metavar="N")
    sub.choices["server"].add_argument("--p2p", action="store_true",
                                       help="peer-to-peer as irdma's responder (READ first)")
    sub.choices["client"].add_argument("--rtr", choices=("send", "write", "read"),
                                       help="peer-to-peer as siw's initiator, offering this RTR")
    sub.choices["server"].add_argument("--no-close", action="store_true")
    a = p.parse_args()
    if not MIN_SIZE <= a.size <= MAX_SIZE:
        p.error("-S must be %d..%d, as rping's" % (MIN_SIZE, MAX_SIZE))
    if a.mode == "client" and a.count < 1:
        p.error("-C must be at least 1")
    exit_with(run, a)


def exit_with(run, a):
    """Exit 0 when run(a) returns true; 1 when it returns false or fails (an error line)."""
    try:
        ok = run(a)
    except (OSError, EOFError, ValueError, PeerError) as e:
        say(event="error", error="%s: %s" % (type(e).__name__, e))
        sys.exit(1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
