#!/usr/bin/env python3
"""Command-line tests that need no root: `demo --json` against the schema of
docs/json.md, the progress line of `sim` and `bench` on a terminal, and
--pdata-file on a FIFO.

Read first: docs/json.md, tools/progress.hpp.

  cli_test.py --bin build/bin/iwarp-cm CASE      (CASE: see CASES below)
"""
import argparse
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
import tty

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import json_lines  # noqa: E402

TIMEOUT = 120
# The sim's progress text, e.g. "sim: 120/1000 seeds, 950 seeds/s, 0 failed".
SIM_PROGRESS = re.compile(r"sim: (\d+)/(\d+) seeds, \d+ seeds/s, (\d+) failed")
BENCH_PROGRESS = re.compile(r"bench: [^\r\n]*\((\d+)/(\d+)\), [0-9.]+ s")


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def run_plain(argv):
    """Runs argv with stdout and stderr on pipes: (exit code, stdout, stderr)."""
    r = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    return r.returncode, r.stdout, r.stderr


def run_tty(argv):
    """Runs argv with stderr on a pseudo-terminal and stdout on a pipe:
    (exit code, stdout, what the terminal received, seconds)."""
    master, slave = pty.openpty()
    tty.setraw(slave)  # bytes as written: no '\n' -> '\r\n'
    start = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    term = b""
    end = start + TIMEOUT
    while time.monotonic() < end:
        ready, _, _ = select.select([master], [], [], 1.0)
        if not ready:
            if p.poll() is not None:
                break
            continue
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: every writer closed its end
            break
        if not chunk:
            break
        term += chunk
    os.close(master)
    out, _ = p.communicate(timeout=10)
    return p.returncode, out.decode(), term.decode(), time.monotonic() - start


def check_lines(text, what):
    """Every line of text is valid against the schema; the lines as objects."""
    lines = [l for l in text.splitlines() if l.strip()]
    check(lines, "%s printed no line" % what)
    schema = json_lines.load_schema()
    for l in lines:
        errs = json_lines.check_line(l, schema)
        check(not errs, "%s: %s" % (what, "; ".join(errs)))
    return [json.loads(l) for l in lines]


# ---------------------------------------------------------------- cases

def case_demo_json(c):
    """demo --json, revision 2 and 1 and with loss: every line valid; the
    request shows the RTR types offered, booleans are booleans."""
    code, out, err = run_plain([c.bin, "demo", "--json"])
    check(code == 0, "demo --json exit %d: %s" % (code, err))
    objs = check_lines(out, "demo --json")
    req = [o for o in objs if o["event"] == "connect_request"]
    check(len(req) == 1 and req[0]["side"] == "B", "one request, at B: %s" % req)
    check(req[0]["p2p"] is True and req[0]["rtr_offered"] == ["send", "write", "read"] and req[0]["mpa_rev"] == 2,
          "revision-2 request: %s" % req[0])
    est = [o for o in objs if o["event"] == "established"]
    check(len(est) == 2 and all(e["rtr"] in ("send", "write", "read") and e["p2p"] is True for e in est),
          "established on both sides with an RTR: %s" % est)
    check(objs[-1]["event"] == "demo_done" and objs[-1]["connected"] is True and objs[-1]["clean"] is True,
          "last line: %s" % objs[-1])

    code, out, err = run_plain([c.bin, "demo", "--json", "--mpa-rev", "1"])
    check(code == 0, "demo --json --mpa-rev 1 exit %d: %s" % (code, err))
    objs = check_lines(out, "demo --json --mpa-rev 1")
    req = [o for o in objs if o["event"] == "connect_request"][0]
    check(req["mpa_rev"] == 1 and req["p2p"] is False and req["rtr_offered"] == [] and req["crc"] is False,
          "revision-1 request: %s" % req)

    code, out, err = run_plain([c.bin, "demo", "--json", "--loss", "0.3", "--seed", "7"])
    objs = check_lines(out, "demo --json --loss 0.3")
    check(objs[-1]["event"] == "demo_done" and objs[-1]["frames_lost"] > 0, "lossy run: %s" % objs[-1])
    check(not any(l.startswith("{") for l in run_plain([c.bin, "demo"])[1].splitlines()),
          "demo without --json printed JSON")


def case_demo_text(c):
    """demo's event lines say what its JSON lines say: the request the RTR
    types offered (the ladder's rtr=SWR), an established connection the one
    chosen (the reply's rtr=S); revision 1 offers none."""
    for rev in ("2", "1"):
        code, out, err = run_plain([c.bin, "demo", "--mpa-rev", rev])
        check(code == 0, "demo --mpa-rev %s exit %d: %s" % (rev, code, err))
        code, js, err = run_plain([c.bin, "demo", "--json", "--mpa-rev", rev])
        objs = check_lines(js, "demo --json --mpa-rev %s" % rev)
        req = [o for o in objs if o["event"] == "connect_request"][0]
        est = [o for o in objs if o["event"] == "established"]
        offered = ",".join(req["rtr_offered"]) or "none"
        lines = [l for l in out.splitlines() if " connect_request " in l]
        check(len(lines) == 1 and (" rtr_offered=%s " % offered) in lines[0] and " rtr=" not in lines[0],
              "request line %r, JSON offers %r" % (lines, offered))
        lines = [l for l in out.splitlines() if " established " in l and "state=" in l]
        chosen = sorted(" rtr=%s" % e["rtr"] for e in est)
        check(len(lines) == 2 and sorted(re.search(r" rtr=\w+", l).group(0) for l in lines) == chosen,
              "established lines %r, JSON chose %r" % (lines, chosen))
        if rev == "2":
            ladder = [l for l in out.splitlines() if "| MPA request" in l]
            check(len(ladder) == 1 and ladder[0].endswith(" rtr=SWR") and offered == "send,write,read",
                  "ladder %r, offered %r" % (ladder, offered))


def case_sim_progress(c):
    """sim on a terminal: a progress line on stderr, redrawn with '\\r', at most
    ten times a second, ended with a newline; on a pipe: nothing. --progress
    and --no-progress choose either way."""
    argv = [c.bin, "sim", "--seeds", "300", "--conns", "4"]
    code, out, term, secs = run_tty(argv)
    check(code == 0, "sim exit %d: %s %s" % (code, out, term))
    shown = SIM_PROGRESS.findall(term)
    check(shown, "no progress line on the terminal: %r" % term[-300:])
    check(shown[0][:2] == ("0", "300") and shown[-1] == ("300", "300", "0"), "first and last: %s" % shown)
    done = [int(s[0]) for s in shown]
    check(done == sorted(done), "seeds done went backwards: %s" % done)
    check(term.count("\r") == len(shown), "each redraw starts with \\r: %r" % term[-300:])
    check(term.endswith("\n"), "progress not ended with a newline: %r" % term[-80:])
    check(len(shown) <= 10 * secs + 2, "%d redraws in %.2f s: more than 10 a second" % (len(shown), secs))
    check("sim: 300 seeds" in out, "summary on stdout: %r" % out)
    print("  %d redraws in %.2f s; last: %s" % (len(shown), secs, term.strip().split("\r")[-1]))

    code, out, err = run_plain(argv)
    check(code == 0 and "sim: 300 seeds" in out, "sim on a pipe: %d %r" % (code, out))
    check(err == "", "stderr is not a terminal, yet sim wrote to it: %r" % err[:300])

    # --no-progress on the terminal draws nothing; --progress on a pipe draws it.
    code, out, term, secs = run_tty(argv + ["--no-progress"])
    check(code == 0 and not SIM_PROGRESS.findall(term), "--no-progress on a terminal: %r" % term[-300:])
    code, out, err = run_plain(argv + ["--progress"])
    check(code == 0 and SIM_PROGRESS.findall(err), "--progress on a pipe: %r" % err[-300:])


def case_bench_progress(c):
    """bench on a terminal: the phase and its step; on a pipe: no progress text."""
    argv = [c.bin, "bench", "--quick", "--reps", "2", "--seconds", "0.05", "--scale", "2000", "--skip-timer",
            "--json"]
    code, out, term, secs = run_tty(argv)
    check(code == 0, "bench exit %d: %s" % (code, term[-500:]))
    results = json.loads(out)  # stdout holds the results alone
    runs = results["rdma"]["runs"]
    check(len(runs) == 12, "rdma: %d runs, want write/send x 3 sizes x CRC off/on" % len(runs))
    for r in runs:
        check(r["errors"] == 0 and r["mb_per_s"] > 0 and r["checksums_mb_per_s"] > 0
              and r["loopback_tcp_mb_per_s"] > 0,
              "rdma run without a figure: %r" % r)
    check(results["rdma"]["crc32c_ns_per_byte"] > 0, "no CRC32c cost")
    points = results["shards"]["points"]
    counts = [p["threads"] for p in points]
    check(counts and counts[0] == 1 and counts == sorted(set(counts)), "shards: threads 1, 2, ...: %r" % counts)
    for p in points:
        # The scaling runs four times --reps, each a quarter of --seconds.
        check(len(p["reps"]) == 8 and all(r["setups"] > 0 and r["errors"] == 0 and
                                          r["frames_across_threads"] == 0 for r in p["reps"]),
              "shards: a repetition without setups, or with errors or frames across threads: %r" % p)
    # The speedup is the ratio of the mean rates, so it lies between the lowest and the
    # highest ratio of a repetition to the one-thread repetition before it.
    one = [r["wall_rate_per_s"] for r in points[0]["reps"]]
    for p in points[1:]:
        rates = [r["wall_rate_per_s"] for r in p["reps"]]
        mean_ratio = sum(rates) / sum(one)
        pairs = [b / a for a, b in zip(one, rates)]
        check(abs(p["speedup"] - mean_ratio) <= 1e-4 * mean_ratio and
              abs(p["paired_min"] - min(pairs)) <= 1e-4 * min(pairs) and
              abs(p["paired_max"] - max(pairs)) <= 1e-4 * max(pairs) and
              p["paired_min"] <= p["speedup"] <= p["paired_max"],
              "shards: speedup %r, pairs %r..%r; from the repetitions %r, %r..%r" %
              (p["speedup"], p["paired_min"], p["paired_max"], mean_ratio, min(pairs), max(pairs)))
    # The ratio to the kernel sockets is that of the means of the interleaved repetitions
    # (setup and teardown, per CPU second), with the least and the greatest ratio of a pair.
    kernel = [k["setups"] / k["cpu_s"] for k in results["kernel"]["reps"]]
    check(len(kernel) == 2, "kernel: %d repetitions, want 2" % len(kernel))
    for key, part in (("cycle_vs_kernel", "setup"), ("offload_cycle_vs_kernel", "setup_offload")):
        ours = [r["setups"] / (r["setup_cpu_s"] + r["teardown_cpu_s"]) for r in results[part]["reps"]]
        pairs = [a / b for a, b in zip(ours, kernel)]
        got = results["ratio"]
        want = sum(ours) / sum(kernel)
        check(abs(got[key] - want) <= 1e-4 * want and abs(got[key + "_min"] - min(pairs)) <= 1e-4 * min(pairs)
              and abs(got[key + "_max"] - max(pairs)) <= 1e-4 * max(pairs),
              "%s: %r..%r, mean %r; from the repetitions %r..%r, mean %r" %
              (key, got[key + "_min"], got[key + "_max"], got[key], min(pairs), max(pairs), want))
    names = [t["name"] for t in results["targets"]]
    check(len(points) < 2 or "setup rate, 2 threads on 2 cores vs 1 (mean of reps)" in names,
          "no scaling target in %r" % names)
    check(names[0] == "setup rate, one core, setup only (checksums computed)",
          "the headline target is not the rate with checksums computed: %r" % names[:2])
    for want in ("RDMA Write 4 KiB vs loopback TCP, CRC off (44-MSS segments, checksum offload)",
                 "RDMA Send 4 KiB vs loopback TCP, CRC off (44-MSS segments, checksum offload)"):
        check(want in names, "no target %r in %r" % (want, names))
    steps = BENCH_PROGRESS.findall(term)
    for text in ("bench: setup rate, iwarp-cm, repetition (1/2)", "bench: setup rate, iwarp-cm, repetition (2/2)",
                 "bench: setup rate, kernel sockets, repetition (2/2)", "bench: scale N=2000, established (1/1)",
                 "bench: scale N=2000, half-open (1/1)", "bench: rdma write (1/12)",
                 "bench: rdma send (12/12)"):
        check(text in term, "%r not on the terminal: %r" % (text, term[-500:]))
    check(re.search(r"\rbench: done, [0-9.]+ s\s*\n$", term), "no final line: %r" % term[-200:])
    print("  %d steps in %.2f s" % (len(steps), secs))

    code, out, err = run_plain(argv)
    check(code == 0, "bench on a pipe: exit %d" % code)
    check("\r" not in err and not BENCH_PROGRESS.search(err) and "bench: done" not in err,
          "stderr is not a terminal, yet bench drew progress: %r" % err[:300])


def case_bench_check(c):
    """bench --check exits 1 when a target is missed, and says how many on
    stderr; without it a missed target fails nothing. At N=1 the bytes per
    idle connection carry the whole fixed cost of the core (about a MiB), so
    the 256-byte target is missed, honestly, in a run of a fraction of a second."""
    argv = [c.bin, "bench", "--json", "--reps", "1", "--seconds", "0.01", "--scale", "1", "--skip-kernel",
            "--skip-rdma", "--skip-stream", "--skip-timer", "--skip-shards"]
    code, out, err = run_plain(argv)
    check(code == 0, "bench without --check: exit %d: %s" % (code, err[-300:]))
    targets = json.loads(out)["targets"]
    missed = [t for t in targets if not t["met"]]
    check(any(t["name"].startswith("bytes per idle established connection") for t in missed),
          "the N=1 memory target met: %r" % targets)
    code, out, err = run_plain(argv + ["--check"])
    check(code == 1, "bench --check with %d missed: exit %d" % (len(missed), code))
    targets = json.loads(out)["targets"]
    want = "iwarp-cm: bench --check: %d of %d targets missed" % (len([t for t in targets if not t["met"]]),
                                                                 len(targets))
    check(want in err, "stderr %r, wanted %r" % (err[-300:], want))
    code, out, err = run_plain([a for a in argv if a != "--json"] + ["--check"])
    check(code == 1 and "MISSED" in out, "the table with --check: exit %d: %r" % (code, out[-300:]))
    code, out, _ = run_plain([c.bin, "bench", "--help"])
    check(code == 0 and "--check" in out, "--check not in bench --help")


def case_pdata_fifo(c):
    """--pdata-file on a FIFO no one writes to is refused at once (exit 2),
    for listen and connect, instead of waiting for a writer forever. As root
    the commands run in a new network namespace, so that a check that
    slipped could not touch a device of this machine."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        fifo = os.path.join(tmp, "pd")
        os.mkfifo(fifo)
        for argv in (["listen", "--tap", "T", "--ip", "10.99.0.2/24", "--port", "4791"],
                     ["connect", "--tap", "T", "--ip", "10.99.0.2/24", "--to", "10.99.0.1:4791"]):
            cmd = ([] if os.geteuid() != 0 else ["unshare", "-n"]) + [c.bin] + argv + ["--pdata-file", fifo]
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                raise Failure("%s --pdata-file FIFO: still waiting after 10 s" % argv[0])
            want = "iwarp-cm: --pdata-file %s: not a regular file" % fifo
            check(r.returncode == 2 and r.stderr.startswith(want) and r.stdout == "",
                  "%s: exit %d, stderr %r" % (argv[0], r.returncode, r.stderr))
            print("  %s: %s" % (argv[0], r.stderr.strip()))


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


class Args:
    def __init__(self, a):
        self.bin = a.bin


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True)
    p.add_argument("case", choices=sorted(CASES))
    a = p.parse_args()
    try:
        CASES[a.case](Args(a))
    except (Failure, subprocess.TimeoutExpired) as e:
        print("FAIL %s: %s" % (a.case, e), flush=True)
        return 1
    print("PASS %s" % a.case, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
