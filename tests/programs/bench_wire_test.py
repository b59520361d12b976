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
NATIVE = ("xdp.native.write_64k_crc_off", "xdp.native.send_64k_crc_off")


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def namespaces_of(pid):
    """The namespaces a bench run of process `pid` made (iwcm-wa-PID, -wb-, -wt-) still there:
    by name, so that another run on the machine at the same time does not count."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    names = [l.split()[0] for l in out.splitlines() if l.strip()]
    return [n for n in names if n.startswith("iwcm-w") and n.endswith("-%d" % pid)]


def bench(args, timeout, env=None):
    """`iwarp-cm ARGS`: its exit code, stdout, stderr and PID."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL, env=env)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise Failure("%s: no end in %d s: %s" % (" ".join(args), timeout, err[-800:]))
    return p.returncode, out, err, p.pid


def close(a, b):
    return abs(a - b) <= 1e-3 * max(abs(a), abs(b), 1e-9)


def case_run(binary):
    rc, out, err, pid = bench([binary, "bench", "--wire", "--skip-memory", "--quick", "--wire-setups",
                               "500", "--json"], 600)
    check(rc == 0, "bench --wire exit %d: %s" % (rc, err[-800:]))
    check(namespaces_of(pid) == [], "namespaces left: %r" % namespaces_of(pid))
    w = json.loads(out)["wire"]
    for path in PATHS + ("kernel",):
        s = w["setup"][path]
        check(s["rate_per_s"] > 0 and s["client_cpu_us"] > 0 and s["server_cpu_us"] > 0,
              "setup %s without a figure: %r" % (path, s))
    for key in ["%s.%s" % (p, op) for p in PATHS for op in OPS] + ["kernel.4k", "kernel.64k"]:
        f = w["throughput"].get(key)
        check(f is not None and f["mb_per_s"] > 0 and f["sender_cpu_ns_per_byte"] > 0
              and f["receiver_cpu_ns_per_byte"] > 0, "throughput %s: %r" % (key, f))
    # The same transfers in-process on the runtime's API (tools/bench_native.hpp).
    for key in NATIVE:
        f = w["throughput"].get(key)
        check(f is not None and f["mb_per_s"] > 0 and f["sender_cpu_ns_per_byte"] > 0
              and f["receiver_cpu_ns_per_byte"] > 0, "throughput %s: %r" % (key, f))
    check(len(w["throughput"]) == len(PATHS) * len(OPS) + 2 + len(NATIVE),
          "throughput keys: %r" % sorted(w["throughput"]))
    for key in ("xdp.send_64", "tap.send_64", "kernel.tcp_64", "xdp.write_64", "xdp.native.write_64",
                "xdp.send_64_busy_poll"):
        x = w["latency"].get(key)
        check(x is not None and 0 < x["p50_us"] <= x["p99_us"], "latency %s: %r" % (key, x))
    # Each target is the ratio of the figures it names, met when at least the bound.
    targets = {t["name"]: t for t in json.loads(out)["targets"]}
    want = {
        "wire: setup rate over AF_XDP vs kernel sockets, same veth":
            (w["setup"]["xdp"]["rate_per_s"] / w["setup"]["kernel"]["rate_per_s"], 5),
        "wire: RDMA Write 64 KiB over AF_XDP vs kernel TCP, CRC off":
            (w["throughput"]["xdp.write_64k_crc_off"]["mb_per_s"] / w["throughput"]["kernel.64k"]["mb_per_s"], 1),
        "wire: 64 B round trip over AF_XDP vs kernel TCP (median, kernel/ours)":
            (w["latency"]["kernel.tcp_64"]["p50_us"] / w["latency"]["xdp.send_64"]["p50_us"], 1),
        "wire: ib_write_bw 64 KiB through the ABI vs in-process":
            (w["throughput"]["xdp.write_64k_crc_off"]["mb_per_s"]
             / w["throughput"]["xdp.native.write_64k_crc_off"]["mb_per_s"], 0.9),
        "wire: ib_send_bw 64 KiB through the ABI vs in-process":
            (w["throughput"]["xdp.send_64k_crc_off"]["mb_per_s"]
             / w["throughput"]["xdp.native.send_64k_crc_off"]["mb_per_s"], 0.9),
    }
    check(sorted(targets) == sorted(want), "targets %r, want %r" % (sorted(targets), sorted(want)))
    for name, (ratio, bound) in want.items():
        t = targets[name]
        check(close(t["measured"], ratio) and t["met"] == (t["measured"] >= bound),
              "%s: measured %r met %r; from the figures %r" % (name, t["measured"], t["met"], ratio))
    # The table names every path.
    rc, out, err, pid = bench([binary, "bench", "--wire", "--skip-memory", "--quick", "--wire-setups",
                               "200"], 600)
    check(rc == 0, "bench --wire (table) exit %d: %s" % (rc, err[-800:]))
    for text in ("on the wire", "xdp.write_64k_crc_off", "kernel.tcp_64", "wire: setup rate over AF_XDP",
                 "xdp.native.write_64k_crc_off", "through the ABI vs in-process"):
        check(text in out, "%r not in the table:\n%s" % (text, out))
    check(namespaces_of(pid) == [], "namespaces left: %r" % namespaces_of(pid))


def case_missing_program(binary):
    # A PATH with the shell and ip alone, no perftest: the run stops before it makes anything.
    with tempfile.TemporaryDirectory() as bin_dir:
        for prog in ("sh", "ip"):
            os.symlink(shutil.which(prog), os.path.join(bin_dir, prog))
        env = dict(os.environ, PATH=bin_dir)
        rc, _, err, pid = bench([binary, "bench", "--wire", "--skip-memory", "--quick"], 120, env)
    check(rc == 1, "exit %d, want 1: %s" % (rc, err))
    check("iwarp-cm: bench --wire: --wire needs ib_write_bw in PATH (Debian: apt install perftest)"
          in err, "stderr: %r" % err)
    check(namespaces_of(pid) == [], "namespaces made: %r" % namespaces_of(pid))


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
