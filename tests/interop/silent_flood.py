#!/usr/bin/env python3
"""Silent connections from kernel sockets, for the interop tests (run inside a test's namespace).

Read first: RFC 5044 section 7.1 (the responder waits for the initiator's MPA
request), docs/design.md "Backlog" (what the CM does with connections that
never send one). Connects to ADDR:PORT until HOLD connections got through (at
most 64 connects in flight; one that fails is replaced), then starts RATE more
each second for SECONDS whether or not the earlier ones got through
(non-blocking connects, as a peer that keeps a listener's backlog full would),
and sends nothing on any of them: each completes the TCP handshake and stays
silent. A connection the other side resets (or closes) is counted and closed;
none is opened again. Prints one JSON line when HOLD have connected and the
resets sent meanwhile have been counted ("holding"), one two seconds into the RATE phase ("flooding") and one at the
end ("silent_done"), then closes every socket.

  silent_flood.py --to ADDR:PORT [--hold N] [--rate R] [--seconds S]

Bounded: a connect fails after 3 s without an answer (its SYN retransmitted
by the kernel meanwhile); the HOLD phase ends after 25 s even short of HOLD,
the RATE phase after S seconds plus 3 s for its last connects and 0.5 s for
resets on their way; at most HOLD + R * S + 64 sockets at once (RLIMIT_NOFILE
is raised to fit).
"""
import argparse
import errno
import json
import resource
import select
import socket
import sys
import time

CONNECT_TIMEOUT = 3.0
IN_FLIGHT = 64
HOLD_LIMIT = 25.0
EVENTS = select.POLLIN | select.POLLOUT | select.POLLERR | select.POLLHUP


class Flood:
    def __init__(self, host, port):
        self.addr = (host, port)
        self.connecting = {}  # fd -> (socket, deadline)
        self.open = {}  # fd -> socket, connected and silent
        self.poll = select.poll()
        self.started = 0
        self.opened = 0
        self.failed = 0  # connects refused or unanswered for CONNECT_TIMEOUT
        self.reset = 0  # ended by the other side with a reset
        self.closed = 0  # ended by the other side with a FIN

    def start_one(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        self.started += 1
        rc = s.connect_ex(self.addr)
        if rc not in (0, errno.EINPROGRESS):
            self.failed += 1
            s.close()
            return
        self.connecting[s.fileno()] = (s, time.monotonic() + CONNECT_TIMEOUT)
        self.poll.register(s.fileno(), select.POLLOUT | select.POLLERR | select.POLLHUP)

    def _drop(self, fd, s):
        self.poll.unregister(fd)
        s.close()

    def _connected(self, fd):
        s, _ = self.connecting.pop(fd)
        if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
            self.failed += 1
            self._drop(fd, s)
            return
        self.opened += 1
        self.open[fd] = s
        self.poll.modify(fd, select.POLLIN | select.POLLERR | select.POLLHUP)

    def _ended(self, fd):
        s = self.open[fd]
        try:
            data = s.recv(1)
        except BlockingIOError:
            return  # woken for nothing: keep it
        except OSError:
            self.reset += 1
        else:
            # The CM never speaks first; a FIN (b"") or bytes both end it for us.
            self.closed += 1
            if data:
                print(json.dumps({"event": "unexpected_bytes"}), flush=True)
        del self.open[fd]
        self._drop(fd, s)

    def reap(self, wait_ms=0):
        """Connects that finished and connections the other side ended, since the last look."""
        for fd, _ in self.poll.poll(wait_ms):
            if fd in self.connecting:
                self._connected(fd)
            elif fd in self.open:
                self._ended(fd)
        now = time.monotonic()
        for fd, (s, deadline) in list(self.connecting.items()):
            if now >= deadline:
                del self.connecting[fd]
                self.failed += 1
                self._drop(fd, s)

    def line(self, event, start):
        return json.dumps({"event": event, "started": self.started, "opened": self.opened,
                           "open": len(self.open), "reset": self.reset, "closed": self.closed,
                           "failed": self.failed, "seconds": round(time.monotonic() - start, 3)})

    def settle(self, seconds=0.5):
        """Reaps for up to `seconds`, until 50 ms pass with nothing to reap: resets
        the other side sent are counted before a line reports them."""
        end = time.monotonic() + seconds
        quiet = time.monotonic() + 0.05
        while time.monotonic() < min(end, quiet):
            if self.poll.poll(10):
                self.reap()
                quiet = time.monotonic() + 0.05

    def close_all(self):
        for s, _ in self.connecting.values():
            s.close()
        for s in self.open.values():
            s.close()
        self.connecting.clear()
        self.open.clear()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--to", required=True)
    p.add_argument("--hold", type=int, default=1000)
    p.add_argument("--rate", type=int, default=100, help="new connections per second after the first HOLD")
    p.add_argument("--seconds", type=float, default=5.0)
    a = p.parse_args()
    host, port = a.to.rsplit(":", 1)
    total = int(a.rate * a.seconds)
    need = a.hold + total + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            sys.exit("RLIMIT_NOFILE hard limit %d below the %d sockets needed" % (hard, need))
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    f = Flood(host, int(port))
    start = time.monotonic()
    try:
        hold_end = start + HOLD_LIMIT
        while f.opened < a.hold and time.monotonic() < hold_end:
            while f.opened + len(f.connecting) < a.hold and len(f.connecting) < IN_FLIGHT:
                f.start_one()
            f.reap(5)
        f.settle()
        print(f.line("holding", start), flush=True)
        t0 = time.monotonic()
        for i in range(total):
            # The i-th new connection at t0 + i / rate: a steady rate, not bursts.
            due = t0 + i / a.rate
            while True:
                left = due - time.monotonic()
                if left <= 0:
                    break
                f.reap(max(1, min(int(left * 1000), 5)))
            f.start_one()
            if i + 1 == 2 * a.rate:
                print(f.line("flooding", start), flush=True)
        end = time.monotonic() + CONNECT_TIMEOUT
        while f.connecting and time.monotonic() < end:
            f.reap(5)
        # The resets of the last ones shed may still be on their way: a bounded look.
        f.settle()
        print(f.line("silent_done", start), flush=True)
    finally:
        f.close_all()


if __name__ == "__main__":
    main()
