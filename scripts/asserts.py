#!/usr/bin/env python3
"""List the functions that assert none of their contracts.

The style rule (docs/design.md "Errors", after TigerBeetle's): every function longer than
a few lines in src/cm, src/tcp and src/rdma states at least one of its contracts with
IWCM_ASSERT: what it needs of its arguments and of the state as it starts, or what it
leaves true as it returns. This script finds the functions that break the rule: for each
given .cpp/.hpp file, every function defined at namespace or class level whose body has
more than --min (5) non-blank, non-comment lines and no IWCM_ASSERT. It prints
`file:line name lines` for each and a total, and exits 0 (the list is for people to read;
a function whose contract the type system already states may stay on it).

The parse is a heuristic, not a C++ parser: comments, strings and preprocessor lines are
blanked, then braces are matched. A `{` at namespace or class level opens a function body
when the text before it has a parameter list and is not a declaration with `=`; braces of
a constructor's initializer list are skipped. Lambdas, local classes and nested blocks
count as part of the function they are in.

  scripts/asserts.py src/cm/*.cpp src/cm/*.hpp
  scripts/asserts.py --min 3 src/tcp/stream.cpp
"""

import argparse
import re
import sys

NAME = re.compile(r"((?:[\w~]+(?:<[^()]*>)?::)*(?:operator\s*(?:\(\)|[^\s(]+)|~?\w+))\s*$")
SCOPE_KEYWORD = re.compile(r"^(?:template\s*<.*>\s*)?(?:(namespace|extern)\b|(class|struct|union)\b|(enum)\b)", re.S)


def strip(text):
    """The text with comments, string and character literals and preprocessor lines
    replaced by spaces; newlines are kept so offsets map to the same lines."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":
            # A directive, with its continuation lines.
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        m = re.match(r'R"([^(\s]*)\(', text[i:i + 20]) if c == "R" else None
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            close = ")" + m.group(1) + '"'
            end = text.find(close, i + len(m.group(0)))
            end = n if end < 0 else end + len(close)
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        if c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):
            # A quote after a digit or letter is a digit separator (1'000), not a literal.
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i))
            i = j + 1
            continue
        out.append(c)
        if c == "\n":
            line_start = True
        i += 1
    return "".join(out)


def matching(text, i, open_c, close_c):
    """The index of the bracket closing the one at i."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_c:
            depth += 1
        elif text[j] == close_c:
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


def classify(header, text, brace):
    """What the `{` at index brace opens, given the text since the last `;`, `{` or `}`:
    'namespace', 'class', 'function', 'init' (a brace of a constructor's initializer
    list) or 'other'."""
    h = header.strip()
    h = re.sub(r"^(?:(?:public|private|protected)\s*:(?!:)\s*)+", "", h)
    h = re.sub(r"^\[\[[^\]]*\]\]\s*", "", h)
    m = SCOPE_KEYWORD.match(h)
    if m and "(" not in h[: m.end()]:
        if m.group(1):
            return "namespace"
        if m.group(2) and "(" not in h:
            return "class"
        if m.group(3):
            return "other"
    paren = h.find("(")
    if paren < 0 or "=" in h[:paren].replace("operator=", "").replace("operator==", ""):
        return "other"
    if h[:paren].rstrip().endswith("operator"):  # operator()(...)
        paren = h.find("(", paren + 2)
    close = matching(h, paren, "(", ")")
    rest = h[close + 1 :].lstrip()
    if rest.startswith(":") and not rest.startswith("::"):
        # An initializer list: a brace right after a member's name initializes the member.
        before = text[:brace].rstrip()
        if before and (before[-1].isalnum() or before[-1] in "_>"):
            return "init"
    return "function"


def functions(path):
    """(line, name, body lines, asserts) for each function defined at namespace or class
    level in the file at path."""
    text = strip(open(path, encoding="utf-8").read())
    lines = text.split("\n")
    line_of = []
    for number, line in enumerate(lines, 1):
        line_of.extend([number] * (len(line) + 1))
    found = []
    scopes = []  # the kinds of the open braces
    header_start = 0
    i = 0
    while i < len(text):
        c = text[i]
        top = all(s in ("namespace", "class") for s in scopes)
        if c == "{" and top:
            kind = classify(text[header_start:i], text, i)
            if kind == "init":
                i = matching(text, i, "{", "}") + 1
                continue
            if kind == "function":
                end = matching(text, i, "{", "}")
                header = text[header_start:i]
                paren = header.find("(")
                if header[:paren].rstrip().endswith("operator"):
                    paren = header.find("(", paren + 2)
                m = NAME.search(re.sub(r"\s+", " ", header[:paren]))
                name = m.group(1) if m else "?"
                first, last = line_of[i], line_of[end]
                body = [l for l in lines[first : last - 1] if l.strip()]
                asserts = "IWCM_ASSERT" in text[i:end]
                found.append((line_of[i], name, len(body), asserts))
                i = end + 1
                header_start = i
                continue
            scopes.append(kind)
            header_start = i + 1
        elif c == "{":
            scopes.append("other")
        elif c == "}":
            if scopes:
                scopes.pop()
            header_start = i + 1
        elif c == ";" and top:
            header_start = i + 1
        i += 1
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help=".cpp and .hpp files")
    parser.add_argument("--min", type=int, default=5, help="list bodies longer than this")
    args = parser.parse_args()
    total = 0
    for path in args.files:
        for line, name, length, asserts in functions(path):
            if length > args.min and not asserts:
                print(f"{path}:{line} {name} {length}")
                total += 1
    print(f"total: {total} function(s) of more than {args.min} lines without IWCM_ASSERT")
    return 0


if __name__ == "__main__":
    sys.exit(main())
