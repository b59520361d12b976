#!/usr/bin/env python3
"""`iwarp-cm bench --wire` (tools/bench_wire.cpp; docs/perf.md "The wire"):
a short run as root gives every figure, each target is the ratio of the
figures it names, and the namespaces it made are gone; without a program
it needs it fails with a clear line and leaves nothing behind.

  bench_wire_test.py --bin build/bin/iwarp-cm run|missing_program
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

PATHS = ("xdp", "tap")
OPS = [op + "_" + size + "_crc_" + crc for op in ("write", "send") for size in ("4k", "64k")
       for crc in ("off", "on")]


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def our_namespaces():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [l.split()[0] for l in out.splitlines() if l.startswith("iwcm-w")]


def close(a, b):
    return abs(a - b) <= 1e-3 * max(abs(a), abs(b), 1e-9)


def case_run(binary):
    before = our_namespaces()
    r = subprocess.run([binary, "bench", "--wire", "--skip-memory", "--quick", "--wire-setups", "500",
                        "--json"], capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    check(r.returncode == 0, "bench --wire exit %d: %s" % (r.returncode, r.stderr[-800:]))
    w = json.loads(r.stdout)["wire"]
    for path in PATHS + ("kernel",):
        s = w["setup"][path]
        check(s["rate_per_s"] > 0 and s["client_cpu_us"] > 0 and s["server_cpu_us"] > 0,
              "setup %s without a figure: %r" % (path, s))
    for key in ["%s.%s" % (p, op) for p in PATHS for op in OPS] + ["kernel.4k", "kernel.64k"]:
        f = w["throughput"].get(key)
        check(f is not None and f["mb_per_s"] > 0 and f["sender_cpu_ns_per_byte"] > 0
              and f["receiver_cpu_ns_per_byte"] > 0, "throughput %s: %r" % (key, f))
    check(len(w["throughput"]) == len(PATHS) * len(OPS) + 2, "throughput keys: %r" % sorted(w["throughput"]))
    for key in ("xdp.send_64", "tap.send_64", "kernel.tcp_64"):
        x = w["latency"].get(key)
        check(x is not None and 0 < x["p50_us"] <= x["p99_us"], "latency %s: %r" % (key, x))
    # Each target is the ratio of the figures it names, met when at least the bound.
    targets = {t["name"]: t for t in json.loads(r.stdout)["targets"]}
    want = {
        "wire: setup rate over AF_XDP vs kernel sockets, same veth":
            (w["setup"]["xdp"]["rate_per_s"] / w["setup"]["kernel"]["rate_per_s"], 5),
        "wire: RDMA Write 64 KiB over AF_XDP vs kernel TCP, CRC off":
            (w["throughput"]["xdp.write_64k_crc_off"]["mb_per_s"] / w["throughput"]["kernel.64k"]["mb_per_s"], 1),
        "wire: 64 B round trip over AF_XDP vs kernel TCP (median, kernel/ours)":
            (w["latency"]["kernel.tcp_64"]["p50_us"] / w["latency"]["xdp.send_64"]["p50_us"], 1),
    }
    check(sorted(targets) == sorted(want), "targets %r, want %r" % (sorted(targets), sorted(want)))
    for name, (ratio, bound) in want.items():
        t = targets[name]
        check(close(t["measured"], ratio) and t["met"] == (t["measured"] >= bound),
              "%s: measured %r met %r; from the figures %r" % (name, t["measured"], t["met"], ratio))
    check(our_namespaces() == before, "namespaces left: %r" % our_namespaces())
    # The table names every path.
    r = subprocess.run([binary, "bench", "--wire", "--skip-memory", "--quick", "--wire-setups", "200"],
                       capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    check(r.returncode == 0, "bench --wire (table) exit %d: %s" % (r.returncode, r.stderr[-800:]))
    for text in ("on the wire", "xdp.write_64k_crc_off", "kernel.tcp_64", "wire: setup rate over AF_XDP"):
        check(text in r.stdout, "%r not in the table:\n%s" % (text, r.stdout))
    check(our_namespaces() == before, "namespaces left: %r" % our_namespaces())


def case_missing_program(binary):
    before = our_namespaces()
    # A PATH with the shell and ip alone, no perftest: the run stops before it makes anything.
    with tempfile.TemporaryDirectory() as bin_dir:
        for prog in ("sh", "ip"):
            os.symlink(shutil.which(prog), os.path.join(bin_dir, prog))
        env = dict(os.environ, PATH=bin_dir)
        r = subprocess.run([binary, "bench", "--wire", "--skip-memory", "--quick"], capture_output=True,
                           text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    check(r.returncode == 1, "exit %d, want 1: %s" % (r.returncode, r.stderr))
    check("iwarp-cm: bench --wire: --wire needs ib_write_bw in PATH (Debian: apt install perftest)"
          in r.stderr, "stderr: %r" % r.stderr)
    check(our_namespaces() == before, "namespaces left: %r" % our_namespaces())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", required=True)
    p.add_argument("case", choices=["run", "missing_program"])
    a = p.parse_args()
    if os.geteuid() != 0:
        print("needs root")
        return 1
    try:
        {"run": case_run, "missing_program": case_missing_program}[a.case](os.path.abspath(a.bin))
    except Failure as e:
        print("FAIL: %s" % e)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
