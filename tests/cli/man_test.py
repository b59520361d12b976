#!/usr/bin/env python3
"""The manual page iwarp-cm(1) that the build writes (scripts/manpage.py).

Read first: scripts/manpage.py, tools/CMakeLists.txt (iwarp-cm-man).

  man_test.py --bin BIN --page PAGE render    groff renders the page with every warning on
                                               and none comes; its sections are there and
                                               every request line is one of the man macros
  man_test.py --bin BIN --page PAGE options   every command of `iwarp-cm --help` is under
                                               COMMANDS, and every option and argument of
                                               `iwarp-cm help COMMAND` in that command's part
                                               of OPTIONS; every exit code and environment
                                               variable the help names is on the page

The help is read here on its own terms (the names at the start of CLI11's
lines), not with the generator's parser, so an option that the page leaves
out fails however it was lost.
"""
import argparse
import re
import shutil
import subprocess
import sys

SECTIONS = ["NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "OPTIONS", "EXIT STATUS",
            "ENVIRONMENT", "SEE ALSO"]
# The requests and macros the page may use (man(7)); any other line that
# starts with a control character is text that was not escaped.
REQUESTS = {"TH", "SH", "SS", "TP", "PP", "RS", "RE", "nf", "fi", "BR", "\\\""}


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def run(argv, timeout=60):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def help_text(binary, argv):
    code, out, err = run([binary] + argv)
    check(code == 0, "iwarp-cm %s: exit %d: %s" % (" ".join(argv), code, err.strip()))
    return out


def groff():
    tool = shutil.which("groff")
    check(tool is not None, "groff is missing (scripts/deps.sh test installs groff-base)")
    return tool


def rendered(page):
    """The page as text: lines wide enough that no option is broken, no
    hyphenation, bold and underline removed, the dash glyphs as ASCII."""
    code, out, err = run([groff(), "-man", "-Tutf8", "-rLL=250n", "-rHY=0", page])
    check(code == 0, "groff failed: %s" % err)
    out = re.sub(r".\x08", "", out)
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)
    return out.replace("\u2010", "-").replace("\u2212", "-")


def sections(text):
    """{heading: lines} of the rendered page (headings start in column 0)."""
    out, current = {}, None
    for line in text.splitlines()[1:]:
        if re.match(r"[A-Z][A-Z ]+$", line):
            current = line.strip()
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return out


def case_render(binary, page):
    code, _, err = run([groff(), "-man", "-Tutf8", "-ww", "-z", page])
    check(code == 0 and not err.strip(), "groff -ww warns about the page:\n%s" % err)
    source = open(page).read().splitlines()
    for n, line in enumerate(source, 1):
        if line.startswith((".", "'")):
            name = line[1:].split(" ")[0] if not line.startswith(".\\\"") else "\\\""
            check(name in REQUESTS, "line %d is read as the request %r: %r" % (n, name, line))
    found = list(sections(rendered(page)))
    check([s for s in found if s in SECTIONS] == SECTIONS,
          "sections %s, expected %s in that order" % (found, SECTIONS))
    version = help_text(binary, ["--version"]).split()[-1]
    check(re.search(r'^\.TH IWARP\\-CM 1 "[0-9-]+" "iwarp\\-cm %s"' % re.escape(version),
                    "\n".join(source), re.M) is not None,
          "the .TH line does not name iwarp-cm(1) %s" % version)
    print("groff -ww: no warnings; %d lines of source; sections %s" % (len(source), ", ".join(found)))


def entry_names(help_out, title):
    """The names at the start of the lines of one block of CLI11's help:
    '  -h,--help   ...' gives -h and --help; '  command TEXT ...' gives command."""
    m = re.search(r"^%s:\n((?:  .*\n?)*)" % re.escape(title), help_out, re.M)
    if not m:
        return []
    names = []
    for line in m.group(1).splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            names += line.split()[0].split(",")
    return names


def case_options(binary, page):
    top = help_text(binary, ["--help"])
    commands = entry_names(top, "Subcommands")
    check(commands, "iwarp-cm --help lists no commands")
    text = rendered(page)
    parts = sections(text)
    listed = {l.split()[0] for l in parts["COMMANDS"] if re.match(r"       \S", l)}
    check(set(commands) <= listed, "COMMANDS lacks %s" % sorted(set(commands) - listed))

    # OPTIONS: the options before a command, then one subsection per command
    # ("   iwarp-cm NAME"); an entry's name starts its line at the indent of 7.
    subsections, current = {"": []}, ""
    for line in parts["OPTIONS"]:
        m = re.match(r"   iwarp-cm (\S+)$", line)
        if m:
            current = m.group(1)
            subsections[current] = []
        else:
            subsections[current].append(line)
    missing = []
    for name, help_args in [("", ["--help"])] + [(c, ["help", c]) for c in commands]:
        if name not in subsections:
            missing.append("the part of iwarp-cm %s" % name)
            continue
        out = top if name == "" else help_text(binary, help_args)
        tags = set()
        for line in subsections[name]:
            if re.match(r"       \S", line):
                tags.update(w.rstrip(",") for w in line.split())
        for option in entry_names(out, "Options") + entry_names(out, "Positionals"):
            if option not in tags:
                missing.append("iwarp-cm %s %s" % (name, option) if name else option)
    check(not missing, "the page lacks:\n  %s" % "\n  ".join(missing))

    codes = [l.split()[0] for l in top.split("Exit codes:")[1].strip().splitlines()]
    shown = {l.split()[0] for l in parts["EXIT STATUS"] if l.strip()}
    check(set(codes) <= shown, "EXIT STATUS lacks %s" % sorted(set(codes) - shown))

    helps = top + "".join(help_text(binary, ["help", c]) for c in commands)
    names = set(re.findall(r"\bIWCM_[A-Z_]+\b", helps))
    environment = "\n".join(parts.get("ENVIRONMENT", []))
    absent = sorted(n for n in names if not re.search(r"\b%s\b" % n, environment))
    check(not absent, "ENVIRONMENT lacks %s" % absent)
    count = sum(len(entry_names(help_text(binary, ["help", c]), "Options")) for c in commands)
    print("%d commands, %d option names of theirs, %d exit codes and %d environment variables: "
          "all on the page" % (len(commands), count, len(codes), len(names)))


# A stand-in for iwarp-cm whose help has what troff would misread: text lines
# that start with '.' or "'", backslashes (a troff escape if left alone), an
# option that looks like a request, and a character outside ASCII.
FAKE_HELP = {
    "--help": """iwarp-cm: .a stand-in \\fBnot bold\\fR
Usage: iwarp-cm [OPTIONS] SUBCOMMAND

Options:
  -h,--help                   Print this help message and exit
  --version                   print the version and exit

Subcommands:
  odd                         'quoted at the start of a line

Example:
  iwarp-cm odd --dot '.TH x' -- -1

Exit codes:
    0  success
    2  usage error
""",
    "odd": """'quoted at the start of a line
Usage: iwarp-cm odd [OPTIONS]

Options:
  -h,--help                   Print this help message and exit
  --dot TEXT                  .SH NOT A HEADING; a path C:\\dir\\ and 5 \u00b5s
  --very-long-option-name-here TEXT:{a,b}=a Needs: --dot
                              .TP on its own line, in [-1 - 5]

Example:
  iwarp-cm odd --dot '.TH x'

Environment: IWCM_ODD, a \\n register name.

Exit codes:
    0  success
    2  usage error
""",
}
FAKE = """#!/usr/bin/env python3
import sys
HELP = %r
a = sys.argv[1:]
if a == ["--version"]:
    print("iwarp-cm 9.9.9")
elif a == ["--help"]:
    sys.stdout.write(HELP["--help"])
elif len(a) == 2 and a[0] == "help" and a[1] in HELP:
    sys.stdout.write(HELP[a[1]])
else:
    sys.exit(2)
"""


def case_escaping(_binary, _page):
    import os
    import tempfile
    generator = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                             "manpage.py")
    with tempfile.TemporaryDirectory() as tmp:
        fake = os.path.join(tmp, "iwarp-cm")
        with open(fake, "w") as f:
            f.write(FAKE % FAKE_HELP)
        os.chmod(fake, 0o755)
        page = os.path.join(tmp, "iwarp-cm.1")
        code, _, err = run([sys.executable, generator, "--bin", fake, "--output", page])
        check(code == 0, "manpage.py failed on the stand-in: %s" % err)
        case_render(fake, page)
        case_options(fake, page)
        text = " ".join(rendered(page).split())
        for want in (".a stand-in \\fBnot bold\\fR", "'quoted at the start of a line",
                     ".SH NOT A HEADING; a path C:\\dir\\ and 5 \u00b5s",
                     ".TP on its own line, in [-1 - 5]", "iwarp-cm odd --dot '.TH x' -- -1",
                     "IWCM_ODD, a \\n register name."):
            check(want in text, "the page does not show %r as the help has it:\n%s" % (want, text))
    print("text that troff would misread shows as the help has it")


CASES = {"render": case_render, "options": case_options, "escaping": case_escaping}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--page", required=True)
    ap.add_argument("case", choices=sorted(CASES))
    args = ap.parse_args()
    try:
        CASES[args.case](args.bin, args.page)
    except FileNotFoundError as e:
        print("FAIL: %s (the iwarp-cm-man target writes the page)" % e)
        return 1
    except Failure as e:
        print("FAIL: %s" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
