#!/usr/bin/env python3
"""The package sets of scripts/deps.sh and the demo's build.

Read first: scripts/deps.sh (the table of sets), Makefile (`make demo`),
CMakePresets.json ("demo").

  deps_test.py sets             the table's lines are well formed; demo is within bench
                                and test, and has none of the test-only tools
  deps_test.py make             `make -n demo`, `test` and `bench` install their own set;
                                demo builds only the iwarp-cm target, from the demo preset
  deps_test.py demo_configure   configures the demo preset in a scratch folder as on a
                                machine with the demo set only (GoogleTest, Google
                                Benchmark and pkg-config hidden from CMake), then checks
                                that the iwarp-cm target needs only the libraries of its
                                own, and that every file the configure found and every
                                header the program's sources include belongs to a
                                package of the demo set or one they depend on (dpkg)
  deps_test.py demo_build       demo_configure, then builds the iwarp-cm target in that
                                folder, checks that nothing else was compiled, that the
                                program links only libraries of those packages, and
                                runs `iwarp-cm demo`. Minutes: not in ctest, run it by
                                hand after changing what the program or library needs.

The first three run in ctest (label deps); demo_configure configures and
preprocesses but compiles nothing, so it takes seconds, not minutes.
"""
import concurrent.futures
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

SRC = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEPS = os.path.join(SRC, "scripts", "deps.sh")
SETS = ("demo", "bench", "test")
# What `make demo` installed before the sets were split, and what only tests
# and other builds need: none of it may be in the demo set.
NOT_DEMO = {"clang", "clang-14", "tshark", "xdp-tools", "nftables", "tcpdump", "libgtest-dev",
            "libgmock-dev", "googletest", "perftest", "rdmacm-utils", "libxdp-dev", "libbpf-dev",
            "libibverbs-dev", "librdmacm-dev", "libbenchmark-dev", "pkg-config", "groff-base"}
# The targets `cmake --build DIR --target iwarp-cm` builds: the program, the
# library (iwcm, iwcm_io, iwcm_runtime: bench --wire's in-process runs) and the
# program's own pieces (tools/CMakeLists.txt).
IWARP_CM_CLOSURE = {"iwarp-cm", "iwcm", "iwcm_io", "iwcm_runtime", "iwarp_cm_bytes", "iwarp_cm_rping"}
# Optional finds the demo's configure must do without: with these hidden the
# configure sees what a machine with only the demo set shows it.
HIDDEN = ("GTest", "benchmark", "PkgConfig")
# The scratch build runs with the system's PATH only, as on a Debian machine
# with nothing but packages installed (no /usr/local, no pyenv or the like).
DEBIAN_ENV = dict(os.environ, PATH="/usr/sbin:/usr/bin:/sbin:/bin")


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def table():
    """The table of scripts/deps.sh: [(sets, package, why)]."""
    text = open(DEPS).read()
    m = re.search(r"cat <<'EOF'\n(.*?)\nEOF\n", text, re.S)
    check(m is not None, "scripts/deps.sh has no table (cat <<'EOF' ... EOF)")
    rows = []
    for line in m.group(1).splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        check(len(parts) == 3, "a line without sets, package and why: %r" % line)
        sets, package, why = parts
        names = sets.split(",")
        check(all(s in SETS for s in names) and len(set(names)) == len(names),
              "unknown or repeated set in %r (sets: %s)" % (line, ", ".join(SETS)))
        check(re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", package) is not None,
              "not a Debian package name: %r" % package)
        check(len(why.split()) >= 2, "%s: say why the package is wanted" % package)
        rows.append((names, package, why))
    packages = [p for _, p, _ in rows]
    check(len(packages) == len(set(packages)), "a package is listed twice")
    return rows


def listed(set_name):
    r = subprocess.run(["bash", DEPS, "--list", set_name], capture_output=True, text=True,
                       timeout=30)
    check(r.returncode == 0, "deps.sh --list %s: exit %d: %s" % (set_name, r.returncode, r.stderr))
    return r.stdout.split()


def case_sets():
    rows = table()
    sets = {s: [p for names, p, _ in rows if s in names] for s in SETS}
    for s in SETS:
        check(listed(s) == sets[s], "deps.sh --list %s does not print the table's %s set" % (s, s))
    demo, bench, test = (set(sets[s]) for s in SETS)
    check(demo < test, "the demo set is not a strict subset of the test set: %s"
          % sorted(demo - test))
    check(demo <= bench, "the bench set lacks demo packages: %s" % sorted(demo - bench))
    check(bench <= test, "the test set lacks bench packages: %s" % sorted(bench - test))
    check(not demo & NOT_DEMO, "the demo set has test-only packages: %s" % sorted(demo & NOT_DEMO))
    r = subprocess.run(["bash", DEPS, "nonsense"], capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and "unknown set" in r.stderr, "an unknown set is not refused")
    for s in SETS:
        print("%-5s %2d packages: %s" % (s, len(sets[s]), " ".join(sets[s])))


def make_dry_run(goal, tmp):
    """The commands `make GOAL` would run, with every build folder in tmp
    (so that none exists and each configure step shows)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    r = subprocess.run(["make", "-n", "--no-print-directory", "-C", SRC, goal, "BUILD=%s/b" % tmp,
                        "DEMO_BUILD=%s/d" % tmp, "BENCH_BUILD=%s/l" % tmp, "JOBS=1"],
                       capture_output=True, text=True, timeout=60, env=env)
    check(r.returncode == 0, "make -n %s: exit %d: %s" % (goal, r.returncode, r.stderr))
    return [l.strip() for l in r.stdout.splitlines() if l.strip()]


def case_make():
    with tempfile.TemporaryDirectory() as tmp:
        for goal, want in (("demo", "demo"), ("test", "test"), ("bench", "bench")):
            lines = make_dry_run(goal, tmp)
            deps = [l for l in lines if "scripts/deps.sh" in l]
            check(deps == ["scripts/deps.sh %s" % want],
                  "make %s runs %s, not only scripts/deps.sh %s" % (goal, deps, want))
        demo = make_dry_run("demo", tmp)
        check("cmake --preset demo -B %s/d" % tmp in demo,
              "make demo does not configure its folder from the demo preset:\n%s" % "\n".join(demo))
        builds = [l for l in demo if l.startswith("cmake --build")]
        check(builds == ["cmake --build %s/d -j 1 --target iwarp-cm" % tmp],
              "make demo builds more than the iwarp-cm target: %s" % builds)
        check(demo[-1] == "%s/d/bin/iwarp-cm demo" % tmp, "make demo does not end with the demo")
        check(not any("%s/b" % tmp in l for l in demo), "make demo touches the tests' build folder")
    print("make demo, test and bench: each its own set; demo builds the iwarp-cm target only")


def configure_demo(build):
    """Configures the demo preset in build with the file API's code model asked
    for: {target name: target json}."""
    query = os.path.join(build, ".cmake", "api", "v1", "query")
    os.makedirs(query)
    open(os.path.join(query, "codemodel-v2"), "w").close()
    cmd = ["cmake", "-S", SRC, "--preset", "demo", "-B", build, "--no-warn-unused-cli"]
    cmd += ["-DCMAKE_DISABLE_FIND_PACKAGE_%s=ON" % p for p in HIDDEN]
    r = subprocess.run(cmd, cwd=SRC, capture_output=True, text=True, timeout=300, env=DEBIAN_ENV)
    check(r.returncode == 0, "the demo preset does not configure with %s hidden:\n%s%s"
          % (", ".join(HIDDEN), r.stdout[-2000:], r.stderr[-3000:]))
    reply = os.path.join(build, ".cmake", "api", "v1", "reply")
    index = json.load(open(sorted(glob.glob(os.path.join(reply, "index-*.json")))[-1]))
    model = json.load(open(os.path.join(reply, index["reply"]["codemodel-v2"]["jsonFile"])))
    targets = {}
    for t in model["configurations"][0]["targets"]:
        targets[t["name"]] = json.load(open(os.path.join(reply, t["jsonFile"])))
    return targets


def dependency_closure(targets, name):
    by_id = {t["id"]: n for n, t in targets.items()}
    seen, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        todo += [by_id[d["id"]] for d in targets[n].get("dependencies", [])]
    return seen


def check_targets(build, targets):
    cache = open(os.path.join(build, "CMakeCache.txt")).read()
    for option in ("IWCM_BUILD_TESTS", "IWCM_BUILD_BENCH", "IWCM_BUILD_EXAMPLES", "IWCM_XDP",
                   "IWCM_ABI"):
        check(re.search(r"^%s:BOOL=OFF$" % option, cache, re.M) is not None,
              "the demo preset does not turn %s off" % option)
    check("iwarp-cm" in targets, "the demo's build has no iwarp-cm target")
    closure = dependency_closure(targets, "iwarp-cm")
    check(closure == IWARP_CM_CLOSURE, "building iwarp-cm builds %s, not %s"
          % (sorted(closure), sorted(IWARP_CM_CLOSURE)))
    extra = [n for n, t in targets.items() if t["type"] == "EXECUTABLE" and n != "iwarp-cm"]
    check(not extra, "the demo's build has other programs (tests, benchmarks, examples): %s"
          % sorted(extra))
    check("iwcm_rdma" not in targets, "the demo's build has the RDMA ABI library")
    for n in closure:
        for group in targets[n].get("compileGroups", []):
            defines = [d["define"] for d in group.get("defines", [])]
            check(not any(d.startswith("IWCM_WITH_XDP") for d in defines),
                  "%s is built with shared-address mode (AF_XDP)" % n)
    return closure


def installed_packages():
    """{package: (depends, provides)} of every installed package."""
    fmt = "${db:Status-Abbrev}\t${Package}\t${Depends}, ${Pre-Depends}\t${Provides}\n"
    out = subprocess.run(["dpkg-query", "-W", "-f", fmt], capture_output=True, text=True,
                         timeout=60).stdout
    pkgs = {}
    for line in out.splitlines():
        status, name, depends, provides = (line.split("\t") + ["", "", ""])[:4]
        if not status.startswith("ii"):
            continue

        def names(field):
            return [re.sub(r"[\s(:].*", "", a.strip()) for g in field.split(",")
                    for a in g.split("|") if a.strip()]
        pkgs[name] = (names(depends), names(provides))
    return pkgs


def closure_of(roots):
    """The installed packages that roots depend on, roots included (every
    alternative of an "a | b" and every provider of a virtual package)."""
    pkgs = installed_packages()
    providers = {}
    for name, (_, provides) in pkgs.items():
        for v in provides:
            providers.setdefault(v, []).append(name)
    missing = [r for r in roots if r not in pkgs]
    check(not missing, "demo packages not installed: %s (scripts/deps.sh demo installs them)"
          % " ".join(missing))
    seen, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        for n in [p] + providers.get(p, []):
            if n in pkgs and n not in seen:
                seen.add(n)
                todo += pkgs[n][0]
    return seen


def owners(paths):
    """{path: packages} for files that dpkg knows; unknown paths map to []."""
    result = {}
    paths = sorted(set(paths))
    for i in range(0, len(paths), 200):
        chunk = paths[i:i + 200]
        out = subprocess.run(["dpkg-query", "-S"] + chunk, capture_output=True, text=True,
                             timeout=120).stdout
        for line in out.splitlines():
            if line.startswith("diversion "):
                continue
            pkgs, _, path = line.partition(": ")
            if path in chunk:
                result[path] = [p.strip().split(":")[0] for p in pkgs.split(",")]
    return {p: result.get(p, []) for p in paths}


def check_owned(files, allowed, what):
    """Every file belongs to a package in allowed (the merged /usr and
    alternatives' links are followed where dpkg knows a file by another path)."""
    found = owners(files)
    retry = {f: os.path.realpath(f) for f, o in found.items() if not o}
    found.update({f: o for f, o in owners(retry.values()).items()})
    bad = []
    for f in files:
        pkgs = found.get(f) or found.get(retry.get(f, f), [])
        if not pkgs:
            bad.append("%s (no package)" % f)
        elif not set(pkgs) & allowed:
            bad.append("%s (%s)" % (f, ", ".join(pkgs)))
    check(not bad, "%s outside the demo set's packages:\n  %s" % (what, "\n  ".join(sorted(bad))))


def cache_files(build):
    """The files and package folders the configure found (CMakeCache.txt):
    tools, the compiler, the Python interpreter, packages' CMake files."""
    files = []
    for line in open(os.path.join(build, "CMakeCache.txt")):
        m = re.match(r"([A-Za-z0-9_.+-]+):(FILEPATH|PATH|INTERNAL)=(/.*)$", line.strip())
        if not m or "NOTFOUND" in m.group(3) or m.group(3).startswith((build, SRC)):
            continue
        name, kind, value = m.groups()
        # FindPython keeps the interpreter it found in an internal entry.
        if (kind == "FILEPATH" or name.endswith("_EXECUTABLE")) and os.path.isfile(value):
            files.append(value)
        elif name.endswith("_DIR") and os.path.isdir(value):
            files += glob.glob(os.path.join(value, "*.cmake"))
    return files


def included_headers(build, closure, targets):
    """Every file outside the tree that the sources of closure include (the
    compiler's own -M list, run on each compile command)."""
    sources = {os.path.normpath(os.path.join(SRC, s["path"]))
               for n in closure for s in targets[n].get("sources", [])}
    commands = [c for c in json.load(open(os.path.join(build, "compile_commands.json")))
                if os.path.normpath(c["file"]) in sources]
    check(commands, "no compile commands for the iwarp-cm target's sources")

    def deps(c):
        argv = shlex.split(c["command"])
        if "-o" in argv:
            i = argv.index("-o")
            del argv[i:i + 2]
        r = subprocess.run(argv + ["-M"], cwd=c["directory"], capture_output=True, text=True,
                           timeout=300, env=DEBIAN_ENV)
        check(r.returncode == 0, "%s does not preprocess: %s" % (c["file"], r.stderr[-1000:]))
        return r.stdout.replace("\\\n", " ").split()[1:]

    headers = set()
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for names in pool.map(deps, commands):
            headers.update(os.path.normpath(os.path.join(build, n)) for n in names)
    return [h for h in headers if not h.startswith((SRC + os.sep, build + os.sep))], len(commands)


def optional_packages():
    """The packages of headers that the sources include only where the compiler
    finds them (`#if __has_include(<h>)` right before `#include <h>`): the
    build goes on without them, so the demo set need not have them."""
    headers = set()
    for d in ("src", "tools", "include"):
        for path in glob.glob(os.path.join(SRC, d, "**", "*.[ch]pp"), recursive=True):
            text = open(path, errors="replace").read()
            headers.update(re.findall(r"#if __has_include\(<([^>]+)>\)\n#include <\1>", text))
    found = [os.path.join("/usr/include", h) for h in sorted(headers)]
    found = [f for f in found if os.path.exists(f)]
    return {p for pkgs in owners(found).values() for p in pkgs}, sorted(headers)


def demo_configured(build):
    targets = configure_demo(build)
    closure = check_targets(build, targets)
    allowed = closure_of(listed("demo"))
    files = cache_files(build)
    check_owned(files, allowed, "configure found files")
    headers, units = included_headers(build, closure, targets)
    optional, guarded = optional_packages()
    check_owned(headers, allowed | optional, "the iwarp-cm target includes files")
    print("demo preset: configures with %s hidden; iwarp-cm builds %s; %d found files and %d "
          "headers of %d sources all from the demo set's %d packages (with their dependencies)"
          % (", ".join(HIDDEN), " ".join(sorted(closure)), len(files), len(headers), units,
             len(allowed)))
    if guarded:
        print("included only where found (__has_include): %s, here from %s"
              % (" ".join(guarded), " ".join(sorted(optional)) or "no package"))
    return closure, allowed


def case_demo_configure():
    with tempfile.TemporaryDirectory(prefix="iwcm-demo-") as tmp:
        demo_configured(os.path.join(tmp, "build"))


def case_demo_build():
    with tempfile.TemporaryDirectory(prefix="iwcm-demo-") as tmp:
        build = os.path.join(tmp, "build")
        closure, allowed = demo_configured(build)
        jobs = os.environ.get("JOBS", str(os.cpu_count() or 1))
        r = subprocess.run(["cmake", "--build", build, "-j", jobs, "--target", "iwarp-cm"],
                           capture_output=True, text=True, timeout=3600, env=DEBIAN_ENV)
        check(r.returncode == 0, "the iwarp-cm target does not build:\n%s%s"
              % (r.stdout[-3000:], r.stderr[-3000:]))
        # Each object lies in CMakeFiles/<target>.dir/ of its target.
        objects = glob.glob(os.path.join(build, "**", "*.o"), recursive=True)
        built = {os.path.basename(o.split(".dir" + os.sep)[0]) for o in objects}
        check(built <= closure, "objects of other targets were compiled: %s"
              % sorted(built - closure))
        programs = sorted(os.listdir(os.path.join(build, "bin")))
        check(programs == ["iwarp-cm"], "bin/ holds %s, not only iwarp-cm" % programs)
        binary = os.path.join(build, "bin", "iwarp-cm")
        ldd = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=60).stdout
        libs = [m.group(1) for m in re.finditer(r"=> (/\S+)", ldd)]
        check_owned(libs, allowed, "iwarp-cm links libraries")
        r = subprocess.run([binary, "demo"], capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, "iwarp-cm demo: exit %d\n%s" % (r.returncode, r.stdout[-2000:]))
        print("built only %s; iwarp-cm links %s; iwarp-cm demo exits 0"
              % (" ".join(sorted(built)), " ".join(os.path.basename(l) for l in libs)))


CASES = {"sets": case_sets, "make": case_make, "demo_configure": case_demo_configure,
         "demo_build": case_demo_build}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print("usage: deps_test.py %s" % "|".join(CASES), file=sys.stderr)
        return 2
    for tool in ("cmake", "dpkg-query", "make"):
        if shutil.which(tool) is None:
            print("FAIL: %s is missing" % tool)
            return 1
    try:
        CASES[sys.argv[1]]()
    except Failure as e:
        print("FAIL: %s" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
