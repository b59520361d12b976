#!/usr/bin/env python3
"""Mutation testing: each small change of tests/mutations.txt is applied alone
to the source, the fast test binaries it names are rebuilt and run, and a
mutation that no test notices (a survivor) is reported, unless the list says
why it is harmless.

Usage:
  scripts/mutate.py [--build DIR] [--list FILE] [--only ID[,ID...]] [--timeout S]
  scripts/mutate.py --check     # the list only: every text to find is there, once

Each mutation is a block of "key: value" lines in the list, blocks apart by a
blank line, '#' lines comments:
  id:       a short name
  file:     the source file, from the repository's top
  find:     text that occurs exactly once in it
  replace:  what it becomes
  tests:    test binaries, each optionally with a gtest filter (cm_tests:Negotiation.*)
  why:      what bug it stands for
  harmless: (only for a known survivor) why no test needs to notice it

The mutated file is restored byte for byte after each run, also on Ctrl-C or an
error; the script refuses to start when a file it would touch has uncommitted
changes, so that `git diff` shows any leftover at once. Builds go to --build
(default build/, configured already) with `nice cmake --build -j2`; at the end the
binaries are rebuilt from the restored sources. Exit status: 0 when every
mutation was killed or is marked harmless, 1 otherwise, 2 on bad input.
"""
import argparse
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS = ("id", "file", "find", "replace", "tests", "why", "harmless")


def parse_list(path):
    muts, cur = [], {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if line.startswith("#"):
                continue
            if not line.strip():
                if cur:
                    muts.append(cur)
                cur = {}
                continue
            key, sep, value = line.partition(": ")
            if not sep or key not in KEYS:
                sys.exit("mutate: %s:%d: expected 'key: value' with a key of %s" % (path, n, ", ".join(KEYS)))
            if key in cur:
                sys.exit("mutate: %s:%d: '%s' given twice in one mutation" % (path, n, key))
            cur[key] = value
    if cur:
        muts.append(cur)
    ids = set()
    for m in muts:
        for key in ("id", "file", "find", "replace", "tests", "why"):
            if key not in m:
                sys.exit("mutate: mutation %s has no '%s'" % (m.get("id", "?"), key))
        if m["id"] in ids:
            sys.exit("mutate: id %s used twice" % m["id"])
        ids.add(m["id"])
        text = read(m["file"])
        if text.count(m["find"]) != 1:
            sys.exit("mutate: %s: the text to find occurs %d times in %s, not once"
                     % (m["id"], text.count(m["find"]), m["file"]))
    return muts


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def write(rel, text):
    with open(os.path.join(ROOT, rel), "w", encoding="utf-8") as f:
        f.write(text)


def run(cmd, timeout):
    """Runs cmd in its own process group; returns (exit code or None on timeout, output)."""
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out.decode(errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return None, out.decode(errors="replace")


def binaries(spec):
    """'cm_tests:Neg.* wire_tests' -> [('cm_tests', 'Neg.*'), ('wire_tests', None)]."""
    out = []
    for item in spec.split():
        name, _, filt = item.partition(":")
        out.append((name, filt or None))
    return out


def build(build_dir, names, timeout):
    cmd = ["nice", "cmake", "--build", build_dir, "-j2", "--target"] + sorted(set(names))
    return run(cmd, timeout)


def try_mutation(m, build_dir, timeout):
    """Returns (verdict, detail): killed, survived, stillborn (does not build) or timeout."""
    tests = binaries(m["tests"])
    code, out = build(build_dir, [name for name, _ in tests], timeout)
    if code is None:
        return "timeout", "build"
    if code != 0:
        errors = [l for l in out.splitlines() if "error:" in l] or out.strip().splitlines()[-1:]
        return "stillborn", errors[0] if errors else ""
    for name, filt in tests:
        cmd = [os.path.join(build_dir, "bin", name), "--gtest_brief=1"]
        if filt:
            cmd.append("--gtest_filter=" + filt)
        code, out = run(cmd, timeout)
        if code is None:
            return "killed", "%s timed out" % name
        if code != 0:
            failed = [l.split("]", 1)[1].strip().split(" ")[0] for l in out.splitlines()
                      if l.startswith("[  FAILED  ]") and "(" in l]
            return "killed", "%s: %s" % (name, ", ".join(failed[:4]) or "exit %d" % code)
    return "survived", ""


def on_term(signum, frame):
    raise KeyboardInterrupt()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--list", default=os.path.join(ROOT, "tests", "mutations.txt"))
    ap.add_argument("--only", default="")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per build or test run")
    ap.add_argument("--check", action="store_true", help="check the list against the source, run nothing")
    a = ap.parse_args()
    if a.check:
        muts = parse_list(a.list)
        print("mutate: %d mutations, each text found once in its file" % len(muts))
        return 0
    if not os.path.isfile(os.path.join(a.build, "CMakeCache.txt")):
        print("mutate: %s is not a configured build (cmake -S . -B %s first)" % (a.build, a.build),
              file=sys.stderr)
        return 2
    muts = parse_list(a.list)
    if a.only:
        want = set(a.only.split(","))
        unknown = want - {m["id"] for m in muts}
        if unknown:
            print("mutate: no mutation named %s" % ", ".join(sorted(unknown)), file=sys.stderr)
            return 2
        muts = [m for m in muts if m["id"] in want]
    files = sorted({m["file"] for m in muts})
    dirty = subprocess.run(["git", "status", "--porcelain", "--"] + files, cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    if dirty:
        print("mutate: commit or stash these first, they would be restored from the mutation's "
              "copy:\n" + dirty, file=sys.stderr)
        return 2
    # Ctrl-C and SIGTERM end the run through the finally below, restoring the file.
    signal.signal(signal.SIGTERM, on_term)
    results = []
    all_tests = set()
    try:
        for i, m in enumerate(muts, 1):
            original = read(m["file"])
            all_tests.update(name for name, _ in binaries(m["tests"]))
            t0 = time.monotonic()
            try:
                write(m["file"], original.replace(m["find"], m["replace"], 1))
                verdict, detail = try_mutation(m, a.build, a.timeout)
            finally:
                write(m["file"], original)
            results.append((m, verdict, detail))
            print("[%d/%d] %-28s %-9s %4.0f s  %s" % (i, len(muts), m["id"], verdict,
                                                    time.monotonic() - t0, detail), flush=True)
    except KeyboardInterrupt:
        print("mutate: interrupted; the source is restored", file=sys.stderr)
        return 1
    finally:
        if all_tests:
            build(a.build, list(all_tests), a.timeout)
    bad = 0
    print()
    for m, verdict, detail in results:
        if verdict == "killed":
            continue
        if verdict == "survived" and "harmless" in m:
            print("survived, harmless: %s (%s): %s" % (m["id"], m["file"], m["harmless"]))
            continue
        bad += 1
        print("%s: %s (%s): %s -- %s" % (verdict.upper(), m["id"], m["file"], m["why"], detail))
    killed = sum(1 for _, v, _ in results if v == "killed")
    print("%d mutations: %d killed, %d not (%d of them without a reason)" % (len(results), killed,
                                                                          len(results) - killed, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
