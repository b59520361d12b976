#!/usr/bin/env python3
"""Plots `iwarp-cm bench` results: setup rate and bytes per connection against N.

Read first: docs/perf.md. Usage:

    python3 bench/plot.py build/perf.json docs/perf.svg

The input is the JSON of `iwarp-cm bench --json-out FILE`; the output is a
self-contained SVG written by hand (standard library only): two panels with a
logarithmic N axis, the measured points, and the targets and the kernel-socket
baseline of the same run as dashed lines.
"""
import json
import math
import sys

W, H = 920, 400
PANEL_W, PANEL_H = 360, 270
MARGIN_L, MARGIN_T = 80, 60
GAP = 110
FONT = 'font-family="DejaVu Sans, Arial, sans-serif"'


def esc(text):
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def human(v):
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            x = v / div
            return f"{x:.0f}{suffix}" if x >= 10 or x == int(x) else f"{x:.1f}{suffix}"
    return f"{v:.0f}"


def nice_max(v):
    if v <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(v))
    for m in (1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * mag >= v:
            return m * mag
    return 10 * mag


class Panel:
    """One chart: log10 x (N), linear y from 0."""

    def __init__(self, x0, y0, ns, ymax, title, ylabel):
        self.x0, self.y0 = x0, y0
        self.lo = math.log10(min(ns)) - 0.25
        self.hi = math.log10(max(ns)) + 0.25
        if self.hi - self.lo < 1:
            self.lo -= 0.5
            self.hi += 0.5
        self.ns, self.ymax = ns, nice_max(ymax)
        self.title, self.ylabel = title, ylabel
        self.out = []

    def px(self, n):
        return self.x0 + (math.log10(n) - self.lo) / (self.hi - self.lo) * PANEL_W

    def py(self, v):
        return self.y0 + PANEL_H - v / self.ymax * PANEL_H

    def axes(self):
        o = self.out
        o.append(f'<text x="{self.x0 + PANEL_W / 2}" y="{self.y0 - 14}" text-anchor="middle" '
                 f'font-size="14" font-weight="bold" {FONT}>{esc(self.title)}</text>')
        o.append(f'<rect x="{self.x0}" y="{self.y0}" width="{PANEL_W}" height="{PANEL_H}" '
                 f'fill="none" stroke="#444"/>')
        for i in range(6):
            v = self.ymax * i / 5
            y = self.py(v)
            o.append(f'<line x1="{self.x0}" y1="{y:.1f}" x2="{self.x0 + PANEL_W}" y2="{y:.1f}" '
                     f'stroke="#ddd"/>')
            o.append(f'<text x="{self.x0 - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
                     f'{FONT}>{human(v)}</text>')
        for n in self.ns:
            x = self.px(n)
            o.append(f'<line x1="{x:.1f}" y1="{self.y0}" x2="{x:.1f}" y2="{self.y0 + PANEL_H}" '
                     f'stroke="#eee"/>')
            o.append(f'<text x="{x:.1f}" y="{self.y0 + PANEL_H + 16}" text-anchor="middle" '
                     f'font-size="11" {FONT}>{human(n)}</text>')
        o.append(f'<text x="{self.x0 + PANEL_W / 2}" y="{self.y0 + PANEL_H + 34}" '
                 f'text-anchor="middle" font-size="12" {FONT}>N concurrent connections held '
                 f'(log scale)</text>')
        cy = self.y0 + PANEL_H / 2
        o.append(f'<text x="{self.x0 - 58}" y="{cy}" text-anchor="middle" font-size="12" '
                 f'transform="rotate(-90 {self.x0 - 58} {cy})" {FONT}>{esc(self.ylabel)}</text>')

    def hline(self, v, color, label):
        if v <= 0 or v > self.ymax:
            return
        y = self.py(v)
        self.out.append(f'<line x1="{self.x0}" y1="{y:.1f}" x2="{self.x0 + PANEL_W}" y2="{y:.1f}" '
                        f'stroke="{color}" stroke-dasharray="6 4"/>')
        self.out.append(f'<text x="{self.x0 + PANEL_W - 4}" y="{y - 4:.1f}" text-anchor="end" '
                        f'font-size="11" fill="{color}" {FONT}>{esc(label)}</text>')

    def series(self, points, color, label, row):
        pts = [(self.px(n), self.py(v)) for n, v in points]
        if len(pts) > 1:
            d = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            self.out.append(f'<polyline points="{d}" fill="none" stroke="{color}" '
                            f'stroke-width="2"/>')
        for (x, y), (_, v) in zip(pts, points):
            self.out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}"/>')
            self.out.append(f'<text x="{x + 6:.1f}" y="{y - 7:.1f}" font-size="10" fill="{color}" '
                            f'{FONT}>{human(v)}</text>')
        ly = self.y0 + 14 + row * 16
        self.out.append(f'<rect x="{self.x0 + 8}" y="{ly - 9}" width="12" height="3" '
                        f'fill="{color}"/>')
        self.out.append(f'<text x="{self.x0 + 24}" y="{ly - 4}" font-size="11" {FONT}>'
                        f'{esc(label)}</text>')


def main(argv):
    if len(argv) != 3:
        print(__doc__)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        r = json.load(f)
    scale = r.get("scale", [])
    if not scale:
        print("no scale points in", argv[1])
        return 1
    ns = [p["n"] for p in scale]
    kernel = r.get("kernel", {}).get("rate_per_s", 0)
    # Setup and teardown, the work the kernel line does too.
    rate_held = [(p["n"], p["established"]["cycle_rate_per_s"]) for p in scale]
    rate_build = [(p["n"], p["established"]["build_rate_per_s"]) for p in scale]
    est = [(p["n"], p["established"]["bytes_per_node"]) for p in scale]
    half = [(p["n"], p["half_open"]["bytes_per_node"]) for p in scale]

    ymax_rate = max([v for _, v in rate_held + rate_build] + [kernel, 1.0e6]) * 1.05
    left = Panel(MARGIN_L, MARGIN_T, ns, ymax_rate, "Setup rate vs N held",
                 "complete setups per CPU-second")
    left.axes()
    left.hline(1.0e6, "#c0392b", "target 1M/s (setup only)")
    left.hline(kernel, "#7f8c8d", f"kernel sockets {human(kernel)}/s (setup and close)")
    left.series(rate_held, "#2471a3", "setups and teardowns/s with N held", 0)
    left.series(rate_build, "#7d3c98", "setups/s while building up to N (no teardown)", 1)

    ymax_mem = max([v for _, v in est + half] + [256]) * 1.15
    right = Panel(MARGIN_L + PANEL_W + GAP, MARGIN_T, ns, ymax_mem,
                  "Memory per connection, one side", "bytes (RSS growth / 2N)")
    right.axes()
    right.hline(256, "#c0392b", "target 256 B (established)")
    right.series(est, "#1e8449", "idle established", 0)
    right.series(half, "#b9770e", "half-open (SYN_SENT + SYN_RCVD)", 1)

    m = r.get("machine", {})
    setup = r.get("setup", {})
    offload = r.get("setup_offload", {}).get("cycle_rate_per_s", 0)
    plain = human(setup.get("cycle_rate_per_s", 0))
    rates = (f"{human(offload)} setups and teardowns/s (checksum offload; {plain} with "
             f"checksums)" if offload else f"{plain} setups and teardowns/s")
    foot = (f"iwarp-cm bench, one thread pinned to one CPU ({m.get('cpu', '?')}): {rates} "
            f"vs kernel {human(kernel)}/s in the same run, per CPU-second.")
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'viewBox="0 0 {W} {H}">',
           f'<rect width="{W}" height="{H}" fill="white"/>']
    svg += left.out + right.out
    svg.append(f'<text x="{W / 2}" y="{H - 10}" text-anchor="middle" font-size="11" '
               f'fill="#555" {FONT}>{esc(foot)}</text>')
    svg.append("</svg>")
    with open(argv[2], "w", encoding="utf-8") as f:
        f.write("\n".join(svg) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
