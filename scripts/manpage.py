#!/usr/bin/env python3
"""Writes the manual page iwarp-cm(1) from the program's own help.

  manpage.py --bin BUILD/bin/iwarp-cm --output iwarp-cm.1

Runs `iwarp-cm --help` and `iwarp-cm help COMMAND` for every command that
help lists (tools/main.cpp), and turns the blocks of CLI11's help into man(7)
macros: the description and "Usage:" line, "Positionals:", "Options:" and
"Subcommands:" (CLI11's two columns: the name within 30 characters, or alone on
its line with the text on the next), then the footer's blocks (tools/cli.cpp,
tools/run.cpp): "Example:", "Exit codes:", "Environment:". A block it does not
know becomes a paragraph, so no help text is left out.

tools/CMakeLists.txt runs it once the program is built; tests/cli/man_test.py
checks that the page renders without warnings and lists every command and
option. The date on the page is SOURCE_DATE_EPOCH's where that is set (for a
build that must come out the same), else today's.
"""
import argparse
import datetime
import os
import re
import subprocess
import sys

NAME_WIDTH = 30  # CLI11's column: a name and its padding, before the description
SEE_ALSO = [("rping", 1), ("ucmatose", 1), ("cmtime", 1), ("rdma_server", 1),
            ("ib_write_bw", 1), ("ib_read_bw", 1), ("ib_send_bw", 1), ("rdma_cm", 7),
            ("tshark", 1), ("ip-tuntap", 8), ("xdp-loader", 8)]


class HelpError(Exception):
    pass


def run_help(binary, argv):
    r = subprocess.run([binary] + argv, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise HelpError("%s %s: exit %d: %s" % (binary, " ".join(argv), r.returncode,
                                                r.stderr.strip()))
    return r.stdout


# Text to troff ---------------------------------------------------------------

OPTION = re.compile(r"(?<![\w\\-])--?[A-Za-z0-9][\w-]*")


def esc(text):
    """Text for a troff line: backslashes printed as such, the dashes of
    options, negative numbers, ranges and the command's name as minus signs
    (the ASCII hyphen-minus that a reader types), options kept from being
    hyphenated, and characters outside ASCII as groff's Unicode escapes."""
    text = text.replace("\\", "\\e")
    text = OPTION.sub(lambda m: "\\%" + m.group(0).replace("-", "\\-"), text)
    text = re.sub(r"(?<![\w\\-])-+(?![\w-])", lambda m: m.group(0).replace("-", "\\-"), text)
    text = re.sub(r"\biwarp-cm\b", r"iwarp\\-cm", text)
    return "".join(c if ord(c) < 128 else "\\[u%04X]" % ord(c) for c in text)


def line(text):
    """A text line: one that starts with a control character (. or ') would be
    read as a request, so it starts with the zero-width \\& instead."""
    text = text.strip()
    return "\\&" + text if text.startswith((".", "'")) else text


def quoted(text):
    """A macro argument in double quotes."""
    return '"%s"' % esc(text).replace('"', "\\(dq")


def tag(name):
    """An option's or a positional's name column: the option names bold, the
    rest (type, limits, default, Excludes:, Needs:) roman."""
    words = []
    for word in name.split(" "):
        if re.fullmatch(r"-[-\w,]*", word) and word not in ("-", "--"):
            words.append(", ".join("\\fB%s\\fR" % esc(w) for w in word.split(",")))
        else:
            words.append(esc(word))
    return " ".join(words)


def synopsis_args(text):
    """`[OPTIONS] [--] PROGRAM [ARGS...]`: placeholders in italics."""
    return re.sub(r"\b([A-Z][A-Z]+(?:\.\.\.)?|command)(?=[\]\s]|$)", r"\\fI\1\\fR", esc(text))


# CLI11's help ------------------------------------------------------------------

class Help:
    """One command's help: its description, usage, entries and footer blocks."""

    def __init__(self, text, where):
        blocks = [b.splitlines() for b in re.split(r"\n\s*\n", text.strip("\n")) if b.strip()]
        head = blocks[0]
        usage = [i for i, l in enumerate(head) if l.startswith("Usage: ")]
        if not usage:
            raise HelpError("%s: no 'Usage:' line" % where)
        self.description = " ".join(l.strip() for l in head[:usage[0]])
        self.usage = head[usage[0]][len("Usage: "):].strip()
        self.blocks = []  # (title, text after the colon, lines)
        for b in blocks[1:]:
            m = re.match(r"([A-Z][A-Za-z ]*):(.*)$", b[0])
            if m:
                self.blocks.append((m.group(1), m.group(2).strip(), b[1:]))
            else:
                self.blocks.append(("", "", b))

    def block(self, title):
        for t, rest, lines in self.blocks:
            if t == title:
                return rest, lines
        return None

    def entries(self, title):
        """The two-column list under title: [(name, description)]."""
        found = self.block(title)
        if found is None:
            return []
        lines = found[1]
        out = []
        i = 0
        while i < len(lines):
            l = lines[i]
            if not l.startswith("  ") or l.startswith(" " * NAME_WIDTH):
                raise HelpError("unexpected line in %s: %r" % (title, l))
            following = []
            while i + 1 < len(lines) and lines[i + 1].startswith(" " * NAME_WIDTH):
                i += 1
                following.append(lines[i].strip())
            if l[NAME_WIDTH - 2:NAME_WIDTH] == "  " or (len(l) > NAME_WIDTH and not following):
                name, first = l[:NAME_WIDTH].strip(), l[NAME_WIDTH:].strip()
            else:
                name, first = l.strip(), ""
            out.append((name, " ".join([first] + following).strip()))
            i += 1
        return out

    def exit_codes(self):
        """"Exit codes:" as (lead-in, [(code, meaning)])."""
        found = self.block("Exit codes")
        if found is None:
            return None
        rest, lines = found
        codes = []
        for l in lines:
            m = re.match(r"\s+(\S+)\s\s+(.*)$", l)
            if not m:
                raise HelpError("unexpected line in Exit codes: %r" % l)
            codes.append((m.group(1), m.group(2).strip()))
        return rest, codes


# The page ------------------------------------------------------------------------

def entry_list(out, entries, italic_names=False):
    for name, text in entries:
        out.append(".TP")
        if italic_names:
            first, _, rest = name.partition(" ")
            out.append(line("\\fI%s\\fR %s" % (esc(first), esc(rest))).rstrip())
        else:
            out.append(line(tag(name)))
        out.append(line(esc(text)) if text else "\\&")


def exit_list(out, lead, codes):
    if lead:
        out.append(".PP")
        out.append(line(esc(lead[:1].upper() + lead[1:])))
    for code, meaning in codes:
        out.append(".TP")
        out.append(line("\\fB%s\\fR" % esc(code)))
        out.append(line(esc(meaning)))


def example_lines(out, lines):
    """Command lines as they are typed: every dash a minus sign (ASCII)."""
    out += [".PP", ".RS", ".nf"]
    out += [line(re.sub(r"(?<!\\)-", r"\\-", esc(l.strip()))) for l in lines if l.strip()]
    out += [".fi", ".RE"]


def command_synopsis(name, h):
    """The arguments after `iwarp-cm NAME`: the Usage line's, or, where the
    description spells out a longer form ("iwarp-cm run [OPTIONS] [--]
    PROGRAM [ARGS...]."), that one."""
    m = re.search(r"iwarp-cm %s (\[OPTIONS\](?: (?:\[[^\]]*\]|[A-Z]+))*)" % re.escape(name),
                  h.description)
    if m:
        return m.group(1)
    prefix = "iwarp-cm %s " % name
    return h.usage[len(prefix):] if h.usage.startswith(prefix) else h.usage


def page(top, commands, version, date):
    out = [".\\\" iwarp-cm(1), written by scripts/manpage.py from the program's help when it is",
           ".\\\" built: change the help (tools/), not this file.",
           ".TH IWARP\\-CM 1 %s %s \"User Commands\"" % (quoted(date), quoted("iwarp-cm " + version))]
    summary = re.sub(r"^iwarp-cm:\s*", "", top.description)
    out += [".SH NAME", "iwarp\\-cm \\- " + esc(summary)]

    out += [".SH SYNOPSIS", ".nf"]
    for name, h in commands:
        out.append(line("\\fBiwarp\\-cm %s\\fR %s"
                        % (esc(name), synopsis_args(command_synopsis(name, h)))))
    top_options = [n.split(" ")[0].split(",")[-1] for n, _ in top.entries("Options")]
    out.append(line("\\fBiwarp\\-cm\\fR %s" % " | ".join(tag(n) for n in top_options)))
    out += [".fi"]

    out += [".SH DESCRIPTION",
            line(esc("iwarp-cm runs a userspace iWARP stack (TCP, MPA, DDP and RDMAP) from the "
                     "command line: over a simulated network, on a TAP device, or on an "
                     "interface it shares with the kernel. Its first word names a command; the "
                     "options after it are that command's own.")),
            ".PP",
            line(esc("iwarp-cm help COMMAND and iwarp-cm COMMAND --help print a command's "
                     "options, as OPTIONS below lists them: this page is made from that help "
                     "when the program is built. A usage error prints one line on standard "
                     "error and exits with status 2."))]

    out += [".SH COMMANDS"]
    for name, text in top.entries("Subcommands"):
        out += [".TP", line("\\fB%s\\fR" % esc(name)), line(esc(text))]

    out += [".SH OPTIONS", line(esc("Before a command:"))]
    entry_list(out, top.entries("Options"))
    top_exit = top.exit_codes()
    environment = []
    for name, h in commands:
        out.append(".SS " + quoted("iwarp-cm " + name))
        out.append(line(esc(h.description)))
        if h.entries("Positionals"):
            out += [".PP", line(esc("Arguments:"))]
            entry_list(out, h.entries("Positionals"), italic_names=True)
        if h.entries("Options"):
            out += [".PP", line(esc("Options:"))]
            entry_list(out, h.entries("Options"))
        for title, rest, lines in h.blocks:
            if title in ("Positionals", "Options", "Subcommands"):
                continue
            if title in ("Example", "Examples"):
                out += [".PP", line(esc(title + ":"))]
                example_lines(out, lines)
            elif title == "Exit codes":
                if h.exit_codes() != top_exit:
                    lead, codes = h.exit_codes()
                    exit_list(out, "Exit status: " + lead if lead else "Exit status:", codes)
            elif title == "Environment":
                environment.append((name, " ".join([rest] + [l.strip() for l in lines])))
                out += [".PP", line(esc("Its environment: see ENVIRONMENT below."))]
            else:
                text = " ".join(l.strip() for l in lines)
                out += [".PP", line(esc("%s: %s %s" % (title, rest, text) if title else text))]

    if top_exit is not None:
        out += [".SH \"EXIT STATUS\""]
        lead, codes = top_exit
        exit_list(out, lead, codes)
        if any(h.exit_codes() not in (None, top_exit) for _, h in commands):
            out += [".PP", line(esc("except where a command's own list under OPTIONS says "
                                    "otherwise."))]

    if environment:
        out += [".SH ENVIRONMENT"]
        for name, text in environment:
            body = re.sub(r"\b(IWCM_[A-Z_]+|LD_PRELOAD)\b", r"\\fB\1\\fR", esc(text))
            out += [".PP", line("\\fBiwarp\\-cm %s\\fR: %s" % (esc(name), body))]

    top_example = top.block("Example") or top.block("Examples")
    if top_example:
        out += [".SH EXAMPLES"]
        example_lines(out, top_example[1])
        out += [".PP", line(esc("Each command's own example is in its part of OPTIONS."))]

    out += [".SH \"SEE ALSO\""]
    out.append(",\n".join(".BR %s (%d)" % (esc(n).replace("-", "\\-"), s) for n, s in SEE_ALSO))
    out.append(".PP")
    out.append(line(esc("README.md and docs/ in the iwarp-cm sources.")))
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="the iwarp-cm program")
    ap.add_argument("--output", required=True, help="the page to write")
    args = ap.parse_args()
    try:
        top = Help(run_help(args.bin, ["--help"]), "iwarp-cm --help")
        version = run_help(args.bin, ["--version"]).strip()
        version = re.sub(r"^iwarp-cm\s+", "", version)
        commands = []
        for name, _ in top.entries("Subcommands"):
            h = Help(run_help(args.bin, ["help", name]), "iwarp-cm help " + name)
            commands.append((name, h))
        if not commands:
            raise HelpError("iwarp-cm --help lists no commands")
    except (HelpError, subprocess.TimeoutExpired) as e:
        print("manpage.py: %s" % e, file=sys.stderr)
        return 1
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = (datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc) if epoch
            else datetime.datetime.now(datetime.timezone.utc))
    text = page(top, commands, version, when.strftime("%Y-%m-%d"))
    tmp = args.output + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
