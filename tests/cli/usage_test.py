#!/usr/bin/env python3
"""Command-line tests of iwarp-cm: bad inputs, --help, --version, the tables of docs/cli.md.

Read first: docs/cli.md, bad_inputs.txt (the rows, one ctest each).

  usage_test.py --bin BIN bad ID          one row of bad_inputs.txt
  usage_test.py --bin BIN help COMMAND    COMMAND --help == help COMMAND; example and exit codes at the end
  usage_test.py --bin BIN version VER     --version prints the project version
  usage_test.py --bin BIN docs docs/cli.md   its tables agree with bad_inputs.txt and --help
  usage_test.py --bin BIN notation -      whole numbers written as 1e3, 1.5e1 are taken, exactly

Every run has a timeout: an input that hangs fails. As root each bad input
runs in a new, empty network namespace (unshare -n), so a check that slipped
could not touch a device of this machine.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 10


def fail(what):
    print("FAIL: " + what)
    sys.exit(1)


def rows():
    out = {}
    with open(os.path.join(HERE, "bad_inputs.txt")) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            rid, args, message, code = [p.strip() for p in line.split("|")]
            out[rid] = (args, message, int(code))
    return out


def expand(args):
    return [re.sub(r"^X\*(\d+)$", lambda m: "X" * int(m.group(1)), a) for a in shlex.split(args)]


def run(binary, argv, isolate=False):
    cmd = [binary] + argv
    if isolate and os.geteuid() == 0:
        cmd = ["unshare", "-n"] + cmd
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        fail("%s did not exit within %d s" % (" ".join(argv)[:200], TIMEOUT))


def case_bad(binary, rid):
    args, message, code = rows()[rid]
    r = run(binary, expand(args), isolate=True)
    err = r.stderr.splitlines()
    print("iwarp-cm %s\n  exit %d, stderr %r" % (args, r.returncode, r.stderr[:300]))
    if r.returncode != code:
        fail("exit code %d, expected %d" % (r.returncode, code))
    if len(err) != 1 or not err[0].startswith("iwarp-cm: ") or message not in err[0]:
        fail("expected one line 'iwarp-cm: ...%s...'" % message)
    if r.stdout:
        fail("stdout is not empty: %r" % r.stdout[:200])


def help_text(binary, argv):
    r = run(binary, argv)
    if r.returncode != 0:
        fail("%s: exit %d (%s)" % (" ".join(argv), r.returncode, r.stderr.strip()))
    return r.stdout


def case_help(binary, command):
    a = help_text(binary, [command, "--help"])
    b = help_text(binary, ["help", command])
    if a != b:
        fail("'%s --help' and 'help %s' differ" % (command, command))
    tail = a[a.find("Example:"):]
    if "Example:" not in a or not tail.splitlines()[1].strip().startswith("iwarp-cm " + command):
        fail("no example of %s at the end:\n%s" % (command, a[-600:]))
    # `run` exits with its program's status: its own table says so.
    last = "(130: SIGINT, 143: SIGTERM)" if command == "run" else "(open connections closed first)"
    if not a.rstrip().endswith(last) or "  2  usage error" not in tail:
        fail("the exit-code table does not end the help:\n%s" % a[-600:])
    # Every option that takes a value shows a default it would take (within
    # the limits it prints), or, required or with a default chosen at run
    # time, none: its text says so.
    lines = a.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"\s+(-[-a-zA-Z]+) (UINT|INT|FLOAT)\b(.*)", line)
        if not m:
            continue
        rest = m.group(3)
        text = " ".join([rest] + [l for l in lines[i + 1:i + 4] if l.startswith(" " * 20)])
        d = re.search(r"in \[(-?[0-9.e+]+) - (-?[0-9.e+]+)\]=(-?[0-9.e+]+)\b", rest)
        if d and not float(d.group(1)) <= float(d.group(3)) <= float(d.group(2)):
            fail("%s shows a default its limits refuse: %r" % (m.group(1), line))
        if "REQUIRED" in rest and "=" in rest:
            fail("%s is required yet shows a default: %r" % (m.group(1), line))
        if "=" not in rest and "REQUIRED" not in rest and "default:" not in text:
            fail("%s shows no default and does not say why: %r" % (m.group(1), line))
    print("help of %s: %d lines, example and exit codes at the end" % (command, len(a.splitlines())))


def case_version(binary, version):
    r = run(binary, ["--version"])
    if r.returncode != 0 or r.stdout.strip() != "iwarp-cm " + version:
        fail("--version: exit %d, %r (expected 'iwarp-cm %s')" % (r.returncode, r.stdout, version))
    print(r.stdout.strip())


def case_docs(binary, page):
    sec = open(page).read()
    table = {}
    for line in sec.splitlines():
        m = re.match(r"\|\s*`iwarp-cm ?(.*?)`\s*\|\s*`?(.*?)`?\s*\|\s*(\d+)\s*\|$", line)
        if m:
            table[m.group(1).replace("\\|", "|")] = (m.group(2), int(m.group(3)))
    want = {args: (message, code) for args, message, code in rows().values()}
    if table != want:
        missing = set(want.items()) - set(table.items())
        extra = set(table.items()) - set(want.items())
        fail("docs/cli.md's table and bad_inputs.txt differ:\n  only in tests: %s\n  only in docs: %s"
             % (sorted(missing), sorted(extra)))
    codes = help_text(binary, ["--help"]).split("Exit codes:")[1].strip().splitlines()
    for line in codes:
        code, what = line.strip().split(None, 1)
        if not re.search(r"\|\s*%s\s*\|\s*%s\s*\|" % (re.escape(code), re.escape(what)), sec):
            fail("docs/cli.md's exit-code table lacks: %s  %s" % (code, what))
    print("docs/cli.md: %d bad-input rows and %d exit codes agree" % (len(table), len(codes)))


def case_notation(binary, _):
    """A whole number is taken in the notation its limits are printed in
    ("1e+09"), exactly; a fraction in any notation is refused (bad_inputs.txt)."""
    for argv, want in ((["demo", "--seed", "1e3"], "seed 1000,"),
                       (["demo", "--seed", "1.5e3"], "seed 1500,"),
                       (["demo", "--seed", "1e+18"], "seed 1000000000000000000,"),
                       (["demo", "--seed", "123456789012345678"], "seed 123456789012345678,"),
                       (["sim", "--seeds", "1.5e1", "--conns", "2"], "sim: 15 seeds (1..15,"),
                       (["sim", "--seeds", "20e-1", "--conns", "2"], "sim: 2 seeds (1..2,")):
        r = run(binary, argv)
        if r.returncode != 0 or want not in r.stdout:
            fail("%s: exit %d, %r (stderr %r); expected %r" % (" ".join(argv), r.returncode, r.stdout[:300],
                                                             r.stderr.strip(), want))
        print("%s: %s" % (" ".join(argv), want))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True)
    p.add_argument("mode", choices=("bad", "help", "version", "docs", "notation"))
    p.add_argument("arg")
    a = p.parse_args()
    {"bad": case_bad, "help": case_help, "version": case_version, "docs": case_docs,
     "notation": case_notation}[a.mode](a.bin, a.arg)
    print("PASS")


if __name__ == "__main__":
    main()
