#!/usr/bin/env python3
"""Crafted SYNs from an AF_PACKET socket, for the interop case ip_options.

Read first: interop_test.py (case_ip_options), src/wire/ipv4.hpp and ipv6.hpp
(what iwarp-cm skips and refuses). Linux will not put an IPv4 option or an IPv6
extension header on a TCP SYN of its own, so this script writes whole Ethernet
frames: one SYN per variant, each from its own source port, in the order given,
then reads the answers on the same device. Run it inside the test's namespace
(root). The last variant should be "plain": iwarp-cm handles frames in order,
so once the plain SYN's SYN-ACK is in, every earlier SYN has been handled and
a missing answer is a refusal, not a delay.

  raw_syn.py --dev br0 --dst-mac MAC --src ADDR --dst ADDR --port 4791 VARIANT...

IPv4 variants: plain, router_alert, nop_eol, fragment (MF set), fragment_offset.
IPv6 variants: plain, hop_by_hop, chain (hop-by-hop, destination options,
routing type 2 with segments left 0), fragment (an atomic fragment header).
Prints one JSON line per variant: answered, and of the SYN-ACK its IP header
(ihl or next_header), flags, window, TCP options (hex) and ack_ok.
"""
import argparse
import ipaddress
import json
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
FIRST_PORT = 41000

V4_OPTIONS = {
    "plain": b"",
    "router_alert": bytes.fromhex("94040000"),        # RFC 2113
    "nop_eol": bytes.fromhex("0101940400000000"),     # NOP NOP RA EOL pad
    "fragment": b"",
    "fragment_offset": b"",
}
V6_EXTENSIONS = {  # (first next header, headers; the last names TCP)
    "plain": (6, b""),
    "hop_by_hop": (0, bytes.fromhex("0600050200000100")),  # Router Alert, PadN
    "chain": (0, bytes.fromhex("3c00050200000100" "2b00010400000000"
                               "0602020000000000" "fd000000000000000000000000000009")),
    "fragment": (44, bytes.fromhex("0600000000001234")),   # offset 0, M clear
}


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def tcp_syn(src, dst, sport, dport, seq):
    """A SYN with an MSS option, its checksum over the pseudo-header."""
    hdr = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 6 << 4, 0x02, 64240, 0, 0) + bytes.fromhex("020405b4")
    if src.version == 4:
        pseudo = src.packed + dst.packed + struct.pack("!BBH", 0, 6, len(hdr))
    else:
        pseudo = src.packed + dst.packed + struct.pack("!I3xB", len(hdr), 6)
    c = csum(pseudo + hdr)
    return hdr[:16] + struct.pack("!H", c) + hdr[18:]


def ipv4(src, dst, variant, payload):
    opts = V4_OPTIONS[variant]
    ihl = 5 + len(opts) // 4
    flags = {"fragment": 0x2000, "fragment_offset": 0x0001}.get(variant, 0x4000)
    h = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, ihl * 4 + len(payload), 0x5151, flags, 64, 6, 0,
                    src.packed, dst.packed) + opts
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return 0x0800, h + payload


def ipv6(src, dst, variant, payload):
    first, exts = V6_EXTENSIONS[variant]
    h = struct.pack("!IHBB", 6 << 28, len(exts) + len(payload), first, 64) + src.packed + dst.packed
    return 0x86DD, h + exts + payload


def parse_answer(frame, src, dst, port):
    """The SYN-ACK's fields if frame is TCP from dst:port to src, else None."""
    etype = struct.unpack("!H", frame[12:14])[0]
    ip = frame[14:]
    if etype == 0x0800 and len(ip) >= 20 and ip[9] == 6:
        ihl = (ip[0] & 0xF) * 4
        if ip[12:16] != dst.packed or ip[16:20] != src.packed:
            return None
        seg, ipinfo = ip[ihl:], {"ihl": ip[0] & 0xF}
    elif etype == 0x86DD and len(ip) >= 40 and ip[6] == 6:
        if ip[8:24] != dst.packed or ip[24:40] != src.packed:
            return None
        seg, ipinfo = ip[40:], {"next_header": ip[6]}
    else:
        return None
    if len(seg) < 20 or struct.unpack("!H", seg[0:2])[0] != port:
        return None
    sport, dport, seq, ack, off, flags, window = struct.unpack("!HHIIBBH", seg[:16])
    doff = (off >> 4) * 4
    return dict(ipinfo, dport=dport, ack=ack, flags=flags, window=window, tcp_options=seg[20:doff].hex())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dev", required=True)
    p.add_argument("--dst-mac", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--dst", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--timeout", type=float, default=10)
    p.add_argument("variants", nargs="+")
    a = p.parse_args()
    src, dst = ipaddress.ip_address(a.src), ipaddress.ip_address(a.dst)
    with open("/sys/class/net/%s/address" % a.dev) as f:
        our_mac = bytes.fromhex(f.read().strip().replace(":", ""))
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((a.dev, 0))
    sent = {}
    for i, variant in enumerate(a.variants):
        sport, seq = FIRST_PORT + i, 1000000 * (i + 1)
        syn = tcp_syn(src, dst, sport, a.port, seq)
        etype, ip = (ipv4 if src.version == 4 else ipv6)(src, dst, variant, syn)
        frame = bytes.fromhex(a.dst_mac.replace(":", "")) + our_mac + struct.pack("!H", etype) + ip
        s.send(frame)
        sent[sport] = (variant, seq)
        print(json.dumps({"event": "sent", "variant": variant, "sport": sport, "len": len(frame)}), flush=True)
    answers = {}
    last = FIRST_PORT + len(a.variants) - 1
    end = time.monotonic() + a.timeout
    while last not in answers and time.monotonic() < end:
        s.settimeout(max(0.01, end - time.monotonic()))
        try:
            frame, addr = s.recvfrom(65535)
        except socket.timeout:
            break
        if addr[2] == PACKET_OUTGOING:
            continue
        ans = parse_answer(frame, src, dst, a.port)
        if ans and ans["dport"] in sent and ans["dport"] not in answers:
            answers[ans["dport"]] = ans
    for sport, (variant, seq) in sent.items():
        ans = answers.get(sport)
        line = {"event": "answer", "variant": variant, "sport": sport, "answered": ans is not None}
        if ans:
            line.update({k: v for k, v in ans.items() if k not in ("dport", "ack")})
            line["ack_ok"] = ans["ack"] == seq + 1
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
