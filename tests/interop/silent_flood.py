#!/usr/bin/env python3
"""Silent connections from kernel sockets, for the interop tests (run inside a test's namespace).

Read first: RFC 5044 section 7.1 (the responder waits for the initiator's MPA
request), docs/design.md "Backlog" (what the CM does with connections that
never send one). Opens HOLD TCP connections to ADDR:PORT one after another and
then RATE more each second for SECONDS, and sends nothing on any of them: each
completes the TCP handshake and stays silent, as a peer holding a listener's
backlog would. A connection the other side resets (or closes) is counted and
closed; no connection is opened again. Prints one JSON line when the first
HOLD are open ("holding") and one at the end ("silent_done"), then closes
every socket.

  silent_flood.py --to ADDR:PORT [--hold N] [--rate R] [--seconds S]

Bounded: each connect waits at most 2 s, the whole run HOLD connects plus S
seconds (and at most HOLD + R * S sockets); RLIMIT_NOFILE is raised to fit.
"""
import argparse
import errno
import json
import resource
import select
import socket
import sys
import time


class Flood:
    def __init__(self, host, port):
        self.addr = (host, port)
        self.open = {}  # fd -> socket, connected and silent
        self.poll = select.poll()
        self.opened = 0
        self.failed = 0  # connects refused or timed out
        self.reset = 0  # ended by the other side with a reset
        self.closed = 0  # ended by the other side with a FIN

    def connect_one(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(2.0)
        try:
            s.connect(self.addr)
        except OSError:
            self.failed += 1
            s.close()
            return
        s.setblocking(False)
        self.open[s.fileno()] = s
        self.poll.register(s.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
        self.opened += 1

    def reap(self):
        """Sockets the other side ended since the last look: counted and closed."""
        for fd, _ in self.poll.poll(0):
            s = self.open.pop(fd)
            self.poll.unregister(fd)
            try:
                data = s.recv(1)
                # The CM never speaks first; a FIN (b"") or bytes both end it for us.
                self.closed += 1
                if data:
                    print(json.dumps({"event": "unexpected_bytes"}), flush=True)
            except ConnectionResetError:
                self.reset += 1
            except OSError as e:
                if e.errno != errno.EAGAIN:
                    self.reset += 1
                else:  # woken for nothing: keep it
                    self.open[fd] = s
                    self.poll.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
                    continue
            s.close()

    def close_all(self):
        for s in self.open.values():
            s.close()
        self.open.clear()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--to", required=True)
    p.add_argument("--hold", type=int, default=1000)
    p.add_argument("--rate", type=int, default=100, help="new connections per second after the first HOLD")
    p.add_argument("--seconds", type=float, default=5.0)
    a = p.parse_args()
    host, port = a.to.rsplit(":", 1)
    need = a.hold + int(a.rate * a.seconds) + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            sys.exit("RLIMIT_NOFILE hard limit %d below the %d sockets needed" % (hard, need))
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    f = Flood(host, int(port))
    start = time.monotonic()
    try:
        for _ in range(a.hold):
            f.connect_one()
            f.reap()
        print(json.dumps({"event": "holding", "opened": f.opened, "open": len(f.open), "reset": f.reset,
                          "failed": f.failed, "seconds": round(time.monotonic() - start, 3)}), flush=True)
        t0 = time.monotonic()
        total = int(a.rate * a.seconds)
        for i in range(total):
            # The i-th new connection at t0 + i / rate: a steady rate, not bursts.
            due = t0 + i / a.rate
            while True:
                f.reap()
                left = due - time.monotonic()
                if left <= 0:
                    break
                time.sleep(min(left, 0.005))
            f.connect_one()
        # The resets of the last ones shed may still be on their way: a bounded look.
        settle = time.monotonic() + 0.5
        while time.monotonic() < settle:
            f.reap()
            time.sleep(0.01)
        print(json.dumps({"event": "silent_done", "opened": f.opened, "open": len(f.open), "reset": f.reset,
                          "closed": f.closed, "failed": f.failed, "seconds": round(time.monotonic() - start, 3)}),
              flush=True)
    finally:
        f.close_all()


if __name__ == "__main__":
    main()
