#!/usr/bin/env python3
"""The JSON lines of `iwarp-cm ... --json` against docs/json-schema.json, and
that schema against its human form, docs/json.md.

Read first: docs/json.md. Standard library only: a validator for the part of
JSON Schema (2020-12) the schema uses: type, const, enum, minimum, maximum,
pattern, properties, required, additionalProperties, propertyNames, items,
oneOf. A keyword it does not know fails loudly, so the schema cannot grow
checks that are silently skipped.

  json_lines.py docs                     docs/json.md documents exactly the schema
  json_lines.py lines FILE|-             every line of FILE is valid
  json_lines.py self-test                the validator rejects what it must
"""
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA_PATH = os.path.join(ROOT, "docs", "json-schema.json")
DOC_PATH = os.path.join(ROOT, "docs", "json.md")

# Keywords that only annotate.
ANNOTATIONS = {"$schema", "title", "description", "x-commands"}
TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def load_schema():
    with open(SCHEMA_PATH) as f:
        return json.load(f)


def errors(value, schema, path="$"):
    """Every way value fails schema, as 'path: reason' strings."""
    out = []
    for key in schema:
        if key not in ANNOTATIONS and key not in CHECKS:
            raise ValueError("schema keyword %r at %s is not supported by this validator" % (key, path))
    for key, arg in schema.items():
        if key in CHECKS:
            out += CHECKS[key](value, arg, schema, path)
    return out


def _type(v, t, _s, path):
    names = t if isinstance(t, list) else [t]
    if any(TYPES[n](v) for n in names):
        return []
    return ["%s: %r is not of type %s" % (path, v, " or ".join(names))]


def _const(v, c, _s, path):
    return [] if v == c and type(v) is type(c) else ["%s: %r is not %r" % (path, v, c)]


def _enum(v, e, _s, path):
    return [] if any(v == x and type(v) is type(x) for x in e) else ["%s: %r not one of %s" % (path, v, e)]


def _minimum(v, m, _s, path):
    ok = not TYPES["number"](v) or v >= m
    return [] if ok else ["%s: %r below the minimum %r" % (path, v, m)]


def _maximum(v, m, _s, path):
    ok = not TYPES["number"](v) or v <= m
    return [] if ok else ["%s: %r above the maximum %r" % (path, v, m)]


def _pattern(v, p, _s, path):
    ok = not isinstance(v, str) or re.search(p, v)
    return [] if ok else ["%s: %r does not match %s" % (path, v, p)]


def _properties(v, props, _s, path):
    if not isinstance(v, dict):
        return []
    out = []
    for k, sub in props.items():
        if k in v:
            out += errors(v[k], sub, "%s.%s" % (path, k))
    return out


def _required(v, req, _s, path):
    if not isinstance(v, dict):
        return []
    return ["%s: field %r missing" % (path, k) for k in req if k not in v]


def _additional(v, allowed, schema, path):
    if allowed is not False or not isinstance(v, dict):
        return []
    return ["%s: unknown field %r" % (path, k) for k in v if k not in schema.get("properties", {})]


def _property_names(v, sub, _s, path):
    if not isinstance(v, dict):
        return []
    out = []
    for k in v:
        out += ["%s: field %r not allowed here (%s)" % (path, k, e) for e in errors(k, sub, path)]
    return out


def _items(v, sub, _s, path):
    if not isinstance(v, list):
        return []
    out = []
    for i, x in enumerate(v):
        out += errors(x, sub, "%s[%d]" % (path, i))
    return out


def _one_of(v, subs, _s, path):
    matching = [i for i, sub in enumerate(subs) if not errors(v, sub, path)]
    if len(matching) == 1:
        return []
    if matching:
        return ["%s: matches %d branches of oneOf" % (path, len(matching))]
    # Report the branch of this event, if there is one: the useful message.
    event = v.get("event") if isinstance(v, dict) else None
    for sub in subs:
        if sub.get("properties", {}).get("event", {}).get("const") == event:
            return ["%s (event %r): %s" % (path, event, "; ".join(errors(v, sub, path)))]
    return ["%s: event %r is not a known line" % (path, event)]


CHECKS = {
    "type": _type, "const": _const, "enum": _enum, "minimum": _minimum, "maximum": _maximum,
    "pattern": _pattern, "properties": _properties, "required": _required,
    "additionalProperties": _additional, "propertyNames": _property_names, "items": _items,
    "oneOf": _one_of,
}


def check_line(line, schema=None):
    """The errors of one printed line (empty if it is valid)."""
    schema = schema or load_schema()
    try:
        obj = json.loads(line)
    except ValueError as e:
        return ["not JSON (%s): %r" % (e, line)]
    return errors(obj, schema)


# ---------------------------------------------------------------- docs/json.md

def type_words(prop):
    """A field's type as docs/json.md writes it, e.g. 'integer or null', 'array of string'."""
    names = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
    words = []
    for n in names:
        words.append("array of %s" % prop["items"]["type"] if n == "array" else n)
    return " or ".join(words)


def table_rows(text, heading):
    """The rows of the first table under '## heading', as lists of cells."""
    m = re.search(r"^## %s\s*$(.*?)(?=^## |\Z)" % re.escape(heading), text, re.M | re.S)
    if not m:
        raise ValueError("docs/json.md has no section '## %s'" % heading)
    rows = []
    for line in m.group(1).splitlines():
        line = line.strip()
        if not line.startswith("|") or re.match(r"^\|[\s:|-]+\|$", line):
            continue
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows[1:]  # without the header


def names(cell):
    return re.findall(r"`([a-z_0-9]+)`", cell)


def norm(text):
    return " ".join(text.replace("`", "").split())


def doc_table(doc_text, heading, schema_names, what, out):
    """The rows of a table of docs/json.md by the name in their first cell;
    notes in out every name that is in only one of the doc and the schema."""
    rows = {}
    for row in table_rows(doc_text, heading):
        if len(row) != 4:
            out.append("%s row with %d cells: %s" % (heading, len(row), row))
        else:
            rows[names(row[0])[0]] = row
    out += ["%s %r is in the schema, not in docs/json.md" % (what, n)
            for n in schema_names if n not in rows]
    out += ["%s %r is in docs/json.md, not in the schema" % (what, n)
            for n in rows if n not in schema_names]
    return rows


def line_problems(event, row, branch, common):
    """A row of the table of lines against its branch of the schema."""
    out = []
    _, commands, fields, meaning = row
    if sorted(names(commands)) != sorted(branch["x-commands"]):
        out.append("%s: commands %s in the doc, %s in the schema"
                   % (event, commands, branch["x-commands"]))
    required, _, optional = fields.partition("optional")
    want_req = [f for f in branch["required"] if f not in common]
    want_opt = [f for f in branch["propertyNames"]["enum"] if f not in branch["required"]]
    if names(required) != want_req or sorted(names(optional)) != sorted(want_opt):
        out.append("%s: fields %r in the doc; schema: %s, optional %s"
                   % (event, fields, want_req, want_opt))
    if norm(meaning) != norm(branch["description"]):
        out.append("%s: meaning %r in the doc, %r in the schema"
                   % (event, meaning, branch["description"]))
    return out


def field_problems(field, row, prop, carriers_in_schema):
    """A row of the table of fields against the schema's property."""
    out = []
    _, typ, carriers, meaning = row
    if norm(typ) != type_words(prop):
        out.append("%s: type %r in the doc, %r in the schema" % (field, typ, type_words(prop)))
    got = ["every line"] if norm(carriers) == "every line" else names(carriers)
    if sorted(got) != sorted(carriers_in_schema) or not got:
        out.append("%s: carried by %r in the doc; schema: %s" % (field, carriers, carriers_in_schema))
    if norm(meaning) != norm(prop["description"]):
        out.append("%s: meaning %r in the doc, %r in the schema"
                   % (field, meaning, prop["description"]))
    return out


def doc_problems(schema=None, doc_text=None):
    """Where docs/json.md and the schema disagree (empty: they agree)."""
    schema = schema or load_schema()
    if doc_text is None:
        with open(DOC_PATH) as f:
            doc_text = f.read()
    out = []
    common = schema["required"]
    props = schema["properties"]
    lines = {b["properties"]["event"]["const"]: b for b in schema["oneOf"]}
    # Lines: name, commands, fields beyond the common ones, meaning.
    rows = doc_table(doc_text, "Lines", lines, "line", out)
    for event in (e for e in lines if e in rows):
        out += line_problems(event, rows[event], lines[event], common)
    # Fields: name, type, the lines that carry it, meaning.
    rows = doc_table(doc_text, "Fields", props, "field", out)
    for field in (f for f in props if f in rows):
        carriers = ["every line"] if field in common else \
            [e for e, b in lines.items() if field in b["propertyNames"]["enum"]]
        out += field_problems(field, rows[field], props[field], carriers)
    return out


# ---------------------------------------------------------------- the commands

def self_test():
    """The validator accepts a good line and rejects each kind of bad one."""
    schema = load_schema()
    good = {"event": "connect_request", "time": 1.5, "local": "10.0.0.2:4791", "remote": "10.0.0.1:5000",
            "mpa_rev": 2, "ird": 1, "ord": 1, "pdata": "hi", "pdata_hex": "6869", "state": "MPAREQ_RCVD",
            "error": None, "p2p": False, "rtr_offered": ["send", "read"], "crc": False, "status": 0}
    problems = []
    if check_line(json.dumps(good), schema):
        problems.append("a good line is refused: %s" % check_line(json.dumps(good), schema))
    bad = [
        dict(good, p2p="no"),                      # a boolean as text
        dict(good, status="0"),                    # a number as text
        dict(good, surprise=1),                    # an unknown field
        dict(good, rtr="send"),                    # a field of another line
        dict(good, rtr_offered=["sometimes"]),     # not an RTR type
        dict(good, pdata_hex="6g"),                # not hex
        {k: v for k, v in good.items() if k != "crc"},  # a field missing
        dict(good, event="no_such_line"),
    ]
    for b in bad:
        if not check_line(json.dumps(b), schema):
            problems.append("a bad line is accepted: %s" % b)
    if not check_line("not json", schema):
        problems.append("text that is not JSON is accepted")
    with open(DOC_PATH) as f:
        doc = f.read()
    if not doc_problems(schema, doc.replace("`rtr_offered`", "`rtr_offers`", 1)):
        problems.append("a renamed field in docs/json.md goes unnoticed")
    if not doc_problems(schema, doc.replace("| boolean |", "| string |", 1)):
        problems.append("a wrong type in docs/json.md goes unnoticed")
    return problems


def main(argv):
    if len(argv) >= 2 and argv[1] == "docs":
        problems = doc_problems()
    elif len(argv) >= 2 and argv[1] == "self-test":
        problems = self_test()
    elif len(argv) == 3 and argv[1] == "lines":
        f = sys.stdin if argv[2] == "-" else open(argv[2])
        schema = load_schema()
        lines = [l for l in f.read().splitlines() if l.strip()]
        problems = ["line %d: %s" % (i + 1, e) for i, l in enumerate(lines) for e in check_line(l, schema)]
        if not lines:
            problems.append("no line to check")
    else:
        print(__doc__)
        return 2
    for p in problems:
        print("FAIL: %s" % p)
    if not problems:
        print("PASS")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
