#!/usr/bin/env python3
"""Check the design Notes: every Note referenced is defined exactly once, by title only.

Usage: check_notes.py [ROOT]   (ROOT: the repository, default the parent of scripts/)

A Note is a design comment with a title, written once at the code it explains
and referred to elsewhere by its title (docs/design.md, "Index of Notes").

Definition: a line whose text, after the comment marker (`//`, `#`, or the `*` of
a block comment; nothing in Markdown), starts with `Note [Title]` followed by
  - a colon and the Note's text on the same line:   // Note [Title]: the text ...
  - or nothing (an optional colon), the text on the following comment lines
    (an empty comment line between is allowed):
        // Note [Title]
        // The text ...
The title of a definition is on one line.

Reference: every other `Note [Title]`, anywhere in a line, the title possibly
wrapped over two comment lines. `// Note [Title]` alone on a line above code (not
above more comment text) marks the code as the Note's and counts as a reference.
References name the title only: a file after it (` in src/x.cc`, ` (swap/y.h)`,
` (see z.h)`, `, \`path\``) is an error, since files move and titles do not.

Scanned: src/, include/, python/, bench/, examples/, tests/, docs/: files *.cc,
*.h, *.cu, *.cuh, *.py, *.md, *.toml, *.cmake and CMakeLists.txt, except the dated
benchmark history in bench/log/ (kept verbatim). In Markdown, fenced code blocks
and `inline code` are not read, so a doc can show the syntax.

Fails (exit 1, one line per problem: file:line: ...) when a referenced title has
no definition, when a title is defined more than once, or when a reference is
followed by a file pointer. Otherwise prints one summary line and exits 0.
"""

import os
import re
import sys
from collections import defaultdict

SCAN_DIRS = ("src", "include", "python", "bench", "examples", "tests", "docs")
EXTENSIONS = (".cc", ".h", ".cu", ".cuh", ".py", ".md", ".toml", ".cmake")
EXCLUDED_DIRS = ("bench/log",)

# A path-like word: has a slash, or ends in a source or doc extension.
_PATH = (
    r"[\w.+\-]*(?:/[\w.+\-]+)+"
    r"|[\w+\-]+(?:\.[\w+\-]+)*\.(?:cc|h|cu|cuh|py|md|toml|cmake|txt|hpp|cpp)\b"
)
_POINTER = re.compile(
    r"\s*(?:"
    r"\(\s*(?:see\s+)?`?(?:" + _PATH + r")`?\s*\)?"  # (src/x.h)  (see x.h)  (`x.h`)
    r"|\(\s*same file\s*\)"  # (same file)
    r"|,?\s*(?:(?:lives|is\s+defined|defined|written)\s+)?in\s+`?(?:" + _PATH + r")`?"  # in x.cc
    r"|,\s*`?(?:" + _PATH + r")`?(?=[\s),;:.]|$)"  # , `src/x.h`
    r")",
    re.IGNORECASE,
)
_NOTE = re.compile(r"\bNote\s+\[([^\[\]]{1,100})\]")
_MARKER = re.compile(r"^[ \t]*(?://+!?|#+|/\*+|\*+(?!/))?[ \t]?")


def scanned_files(root):
    for top in SCAN_DIRS:
        base = os.path.join(root, top)
        for dirpath, dirnames, filenames in os.walk(base):
            rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
            dirnames[:] = sorted(
                d
                for d in dirnames
                if not d.startswith(".")
                and d != "__pycache__"
                and f"{rel_dir}/{d}" not in EXCLUDED_DIRS
            )
            for name in sorted(filenames):
                if name.endswith(EXTENSIONS) or name == "CMakeLists.txt":
                    yield os.path.join(dirpath, name), f"{rel_dir}/{name}"


def markdown_text(lines):
    """Markdown lines with fenced code blocks and inline code blanked (same lengths)."""
    out, fenced = [], False
    for line in lines:
        if re.match(r"^\s*(```|~~~)", line):
            fenced = not fenced
            out.append(" " * len(line))
            continue
        if fenced:
            out.append(" " * len(line))
            continue
        out.append(re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), line))
    return out


def scan(path, rel):
    """Yields (kind, title, line, pointer) for each Note in the file; kind: def or ref."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    markdown = rel.endswith(".md")
    raw_lines = lines
    if markdown:
        lines = markdown_text(lines)  # same lengths; pointers are read from raw_lines
    # The text of each line without its comment marker, joined with newlines, so a
    # title or a pointer wrapped onto the next comment line still matches.
    bodies, raw_bodies, starts, marked = [], [], [], []
    offset = 0
    for line, raw in zip(lines, raw_lines):
        m = None if markdown else _MARKER.match(line)
        body = line[m.end():] if m else line
        marked.append(bool(m and m.group(0).strip()))
        bodies.append(body)
        raw_bodies.append(raw[m.end():] if m else raw)
        starts.append(offset)
        offset += len(body) + 1
    text = "\n".join(bodies)
    raw_text = "\n".join(raw_bodies)

    def line_of(pos):
        lo, hi = 0, len(starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo

    for m in _NOTE.finditer(text):
        title = " ".join(m.group(1).split())
        i = line_of(m.start())
        body = bodies[i]
        at_start = body[: m.start() - starts[i]].strip() == ""
        on_one_line = "\n" not in m.group(0)
        rest = text[m.end(): starts[i] + len(body)] if on_one_line else None
        kind = "ref"
        if at_start and on_one_line and (markdown or marked[i]):
            if re.match(r":\s*\S", rest):
                kind = "def"
            elif re.fullmatch(r":?\s*", rest):
                # The text follows on the next comment lines (an empty one between
                # is allowed); code right below makes the line a reference.
                nxt = i + 1
                while nxt < len(bodies) and (markdown or marked[nxt]) and not bodies[nxt].strip():
                    nxt += 1
                if nxt < len(bodies) and (markdown or marked[nxt]) and bodies[nxt].strip():
                    kind = "def"
        pointer = None
        if kind == "ref":
            p = _POINTER.match(raw_text, m.end())
            if p:
                pointer = " ".join(p.group(0).split())
        yield kind, title, i + 1, pointer


def main(argv):
    default_root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    root = os.path.abspath(argv[1] if len(argv) > 1 else default_root)
    defs, refs = defaultdict(list), defaultdict(list)
    errors = []
    files = 0
    for path, rel in scanned_files(root):
        files += 1
        for kind, title, line, pointer in scan(path, rel):
            where = f"{rel}:{line}"
            if kind == "def":
                defs[title].append(where)
            else:
                refs[title].append(where)
                if pointer:
                    errors.append(
                        f"{where}: Note [{title}] is followed by a file pointer "
                        f"'{pointer}': refer to a Note by its title only"
                    )
    for title, places in sorted(defs.items()):
        if len(places) > 1:
            for where in places:
                errors.append(
                    f"{where}: Note [{title}] is defined {len(places)} times "
                    f"({', '.join(places)}); keep one definition, refer to it elsewhere"
                )
    for title, places in sorted(refs.items()):
        if title not in defs:
            for where in places:
                errors.append(f"{where}: Note [{title}] is referenced but defined nowhere")
    if errors:
        for e in sorted(errors):
            print(e)
        print(f"check_notes: {len(errors)} problem(s) in the design Notes (see docs/design.md, "
              f"'Index of Notes')", file=sys.stderr)
        return 1
    n_refs = sum(len(v) for v in refs.values())
    print(f"check_notes: {len(defs)} notes defined once each, {n_refs} references to "
          f"{len(refs)} of them, none undefined or with a file pointer ({files} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
