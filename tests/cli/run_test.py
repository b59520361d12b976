#!/usr/bin/env python3
"""`iwarp-cm run -- PROGRAM` without a network: the environment the program
gets, where the library is looked for, exec failures, the exit status and
the signals passed on. Needs no root; the usage errors are rows of
bad_inputs.txt (usage_test.py).

Read first: docs/applications.md, tools/run.cpp.

  run_test.py --bin build/bin/iwarp-cm CASE      (CASE: see CASES below)

The library to preload only has to exist for these cases (the programs run
here use no RDMA): IWCM_LIBRARY names this process's own C library, which
every program has loaded anyway, unless a case is about the lookup itself.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TIMEOUT = 20
TAP = ["--tap", "iwcm-t", "--ip", "10.99.0.2/24"]
VARIABLES = ("IWCM_TAP", "IWCM_IP", "IWCM_MAC", "IWCM_GATEWAY", "IWCM_VLAN", "IWCM_DEV", "IWCM_XDP_MODE",
             "IWCM_SWITCH", "IWCM_CRC", "IWCM_TOS", "IWCM_MPA_REV", "IWCM_PCAP", "IWCM_SETTLE", "IWCM_BUSY_POLL",
             "IWCM_TAP_OFFLOAD")


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def loaded(name):
    """The path of a shared object this process has mapped (e.g. libc.so.6)."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if os.path.basename(path).startswith(name):
                return path
    raise Failure("%s is not mapped in this process" % name)


def environment(extra=None):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["IWCM_LIBRARY"] = loaded("libc.so")
    env.update(extra or {})
    return env


def run(c, argv, env=None, cwd=None):
    try:
        return subprocess.run([c.bin, "run"] + argv, capture_output=True, text=True, timeout=TIMEOUT,
                              env=env if env is not None else environment(), stdin=subprocess.DEVNULL, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise Failure("run %s did not exit within %d s" % (" ".join(argv), TIMEOUT))


def child_env(r):
    check(r.returncode == 0, "env under run: exit %d, stderr %r" % (r.returncode, r.stderr))
    got = dict(l.split("=", 1) for l in r.stdout.splitlines() if "=" in l)
    # An AddressSanitizer build of iwarp-cm puts the sanitizer's runtime first.
    if "LD_PRELOAD" in got:
        got["LD_PRELOAD"] = re.sub(r"^[^:]*/libasan\.so[^:]*:", "", got["LD_PRELOAD"])
    return got


def poll(what, fn, timeout=10):
    end = time.monotonic() + timeout
    while not fn():
        if time.monotonic() > end:
            raise Failure("%s: not within %.0f s" % (what, timeout))
        time.sleep(0.02)


# ---------------------------------------------------------------- cases

def case_env_tap(c):
    """Every option of TAP mode becomes its variable, as the runtime reads it;
    variables of options not given are removed (a stale IWCM_DEV would make
    the runtime refuse both modes); LD_PRELOAD starts with the library and
    keeps what was there."""
    pcap = os.path.join(c.tmp, "x.pcap")
    before = loaded("libm.so")  # python3 links it
    env = environment({"IWCM_DEV": "stale0", "IWCM_XDP_MODE": "native", "IWCM_SETTLE": "9",
                       "LD_PRELOAD": before})
    r = run(c, TAP + ["--mac", "02:00:00:00:00:05", "--gateway", "10.99.0.1",
                          "--vlan", "7", "--crc", "--tos", "0x10", "--mpa-rev", "1", "--pcap", "x.pcap", "--settle", "500",
                          "--busy-poll", "50", "--no-tap-offload", "--", "env"],
            env=env, cwd=c.tmp)
    got = child_env(r)
    want = {"IWCM_TAP": "iwcm-t", "IWCM_IP": "10.99.0.2/24", "IWCM_MAC": "02:00:00:00:00:05",
            "IWCM_GATEWAY": "10.99.0.1", "IWCM_VLAN": "7", "IWCM_CRC": "1", "IWCM_TOS": "16",
            "IWCM_MPA_REV": "1", "IWCM_PCAP": pcap, "IWCM_SETTLE": "500",
            "IWCM_BUSY_POLL": "50", "IWCM_TAP_OFFLOAD": "0"}
    seen = {k: v for k, v in got.items() if k in VARIABLES}
    check(seen == want, "variables %s, expected %s" % (seen, want))
    check(got.get("LD_PRELOAD") == env["IWCM_LIBRARY"] + ":" + before,
          "LD_PRELOAD %r, expected the library before %r" % (got.get("LD_PRELOAD"), before))
    check(os.path.exists(pcap), "--pcap was not opened for writing before the program ran")
    print("  %s" % " ".join("%s=%s" % kv for kv in sorted(seen.items())))


def case_env_minimal(c):
    """Only --tap and --ip given (and --vlan -1, the default): the program sees
    those two variables and no other, the defaults being the runtime's;
    LD_PRELOAD is the library alone."""
    env = environment({k: "stale" for k in VARIABLES})
    # --vlan -1 is the default, no VLAN, which the runtime takes as no variable.
    got = child_env(run(c, TAP + ["--vlan", "-1", "--", "env"], env=env))
    seen = {k: v for k, v in got.items() if k in VARIABLES}
    check(seen == {"IWCM_TAP": "iwcm-t", "IWCM_IP": "10.99.0.2/24"}, "variables %s" % seen)
    check(got.get("LD_PRELOAD") == env["IWCM_LIBRARY"], "LD_PRELOAD %r" % got.get("LD_PRELOAD"))
    # Arguments reach the program as they are, those that look like options included.
    r = run(c, TAP + ["--", "sh", "-c", 'printf "%s|" "$@"', "sh", "-s", "--tap", "a b", ""])
    check(r.returncode == 0 and r.stdout == "-s|--tap|a b||", "arguments: %d %r" % (r.returncode, r.stdout))


def case_library_lookup(c):
    """Without IWCM_LIBRARY the library is <bin>/../lib/libiwcm_rdma.so:
    missing, one line and exit 1 before anything runs; present, preloaded by
    that name. IWCM_LIBRARY naming a missing file: one line, exit 1."""
    bindir = os.path.join(c.tmp, "bin")
    libdir = os.path.join(c.tmp, "lib")
    os.makedirs(bindir)
    binary = shutil.copy(c.bin, bindir)
    marker = os.path.join(c.tmp, "ran")
    env = environment()
    del env["IWCM_LIBRARY"]
    r = subprocess.run([binary, "run"] + TAP + ["--", "touch", marker], capture_output=True, text=True,
                       timeout=TIMEOUT, env=env)
    check(r.returncode == 1, "no library: exit %d, expected 1 (%r)" % (r.returncode, r.stderr))
    lines = r.stderr.splitlines()
    check(len(lines) == 1 and lines[0].startswith("iwarp-cm run: libiwcm_rdma.so not found: no " +
                                                   os.path.join(bindir, "../lib/libiwcm_rdma.so")),
          "no library: stderr %r" % r.stderr)
    check(not os.path.exists(marker), "the program ran without its library")
    os.makedirs(libdir)
    lib = os.path.join(libdir, "libiwcm_rdma.so")
    os.symlink(loaded("libc.so"), lib)
    r = subprocess.run([binary, "run"] + TAP + ["--", "printenv", "LD_PRELOAD"], capture_output=True,
                       text=True, timeout=TIMEOUT, env=env)
    check(r.returncode == 0 and r.stdout.strip() == lib, "found: exit %d, LD_PRELOAD %r, expected %r (%r)" %
          (r.returncode, r.stdout, lib, r.stderr))
    env["IWCM_LIBRARY"] = "/nonexistent/libx.so"
    r = subprocess.run([binary, "run"] + TAP + ["--", "true"], capture_output=True, text=True, timeout=TIMEOUT,
                       env=env)
    check(r.returncode == 1 and r.stderr == "iwarp-cm run: IWCM_LIBRARY=/nonexistent/libx.so: "
                                            "No such file or directory\n",
          "IWCM_LIBRARY missing: exit %d, %r" % (r.returncode, r.stderr))
    print("  %s" % lib)


def case_exec_errors(c):
    """A program not found: 127; found but not executable: 126; one line
    each, as a shell would say it."""
    plain = os.path.join(c.tmp, "plain")
    open(plain, "w").close()
    os.chmod(plain, 0o644)
    for prog, code, why in (("/nonexistent/prog", 127, "No such file or directory"),
                            ("iwcm-no-such-program", 127, "No such file or directory"),
                            (plain, 126, "Permission denied")):
        r = run(c, TAP + ["--", prog, "-x"])
        want = "iwarp-cm run: %s: %s\n" % (prog, why)
        check(r.returncode == code and r.stderr == want and r.stdout == "",
              "%s: exit %d, stderr %r; expected %d, %r" % (prog, r.returncode, r.stderr, code, want))
        print("  %s: %d" % (prog, code))


def case_exit_status(c):
    """The program's exit status is run's; killed by signal N: 128 + N; its
    output passes through."""
    for script, code in (("exit 0", 0), ("exit 3", 3), ("echo out; echo err >&2; exit 255", 255),
                         ("kill -TERM $$", 143), ("kill -INT $$", 130), ("kill -KILL $$", 137)):
        r = run(c, TAP + ["--", "sh", "-c", script])
        check(r.returncode == code, "sh -c %r: exit %d, expected %d (%r)" % (script, r.returncode, code, r.stderr))
        if "echo" in script:
            check(r.stdout == "out\n" and r.stderr == "err\n", "output: %r %r" % (r.stdout, r.stderr))
        print("  sh -c %r: %d" % (script, code))


def start_trapping(c, sig, flag):
    """run -- sh with a trap for `sig` that writes `flag` and exits 10 + N."""
    ready = flag + ".ready"
    script = ('trap \'echo "got $$" > %s; exit %d\' %s; echo "$$" > %s; while :; do sleep 0.05; done' %
              (flag, 10 + sig, signal.Signals(sig).name[3:], ready))
    p = subprocess.Popen([c.bin, "run"] + TAP + ["--", "sh", "-c", script], env=environment(),
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        poll("the program's trap set", lambda: os.path.exists(ready) and open(ready).read().endswith("\n"))
    except Failure:
        p.kill()
        raise
    return p, int(open(ready).read())


def case_signals(c):
    """SIGTERM, SIGINT and SIGHUP sent to run reach the program (its trap
    runs in the program's own process, not run's), and its exit status is
    run's."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        flag = os.path.join(c.tmp, "got-%s" % sig.name)
        p, child = start_trapping(c, sig, flag)
        check(child != p.pid, "the program runs in run's own process")
        os.kill(p.pid, sig)
        try:
            out, err = p.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            os.kill(child, signal.SIGKILL)
            raise Failure("%s: run did not exit" % sig.name)
        check(p.returncode == 10 + sig, "%s: exit %d, expected %d (%r)" % (sig.name, p.returncode, 10 + sig, err))
        check(open(flag).read() == "got %d\n" % child, "%s: the trap wrote %r" % (sig.name, open(flag).read()))
        print("  %s: the program's trap ran, exit %d" % (sig.name, p.returncode))


def case_parent_killed(c):
    """run killed with SIGKILL (which it cannot pass on): the program dies too."""
    flag = os.path.join(c.tmp, "never")
    p, child = start_trapping(c, signal.SIGTERM, flag)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=TIMEOUT)

    def gone():
        try:
            with open("/proc/%d/stat" % child) as f:
                return f.read().split(") ")[1][0] in "ZX"  # exited, not yet reaped by init
        except FileNotFoundError:
            return True
    try:
        poll("the program to die with run", gone)
    except Failure:
        os.kill(child, signal.SIGKILL)
        raise
    print("  pid %d ended with run" % child)


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True)
    p.add_argument("case", choices=sorted(CASES))
    a = p.parse_args()
    a.bin = os.path.abspath(a.bin)
    with tempfile.TemporaryDirectory(prefix="iwcm-run-") as tmp:
        a.tmp = tmp
        try:
            CASES[a.case](a)
        except Failure as e:
            print("FAIL %s: %s" % (a.case, e))
            return 1
    print("PASS %s" % a.case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
