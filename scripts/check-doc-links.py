#!/usr/bin/env python3
"""Check the links of the repository's markdown files.

Every relative link ([text](path), [text](path#anchor), [text](#anchor))
in README.md and docs/**/*.md must name a file that exists and, when it
has an anchor, a heading of that file whose GitHub anchor is the same
(lowercase, punctuation other than '-' and '_' removed, spaces to '-',
"-1", "-2" ... for repeated headings). Links inside fenced code blocks
and inline code are ignored, and so are http(s) and mailto links.

Usage: python3 scripts/check-doc-links.py [FILE.md ...]
Prints one line per broken link and exits 1 when there is any.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LINK = re.compile(r"(?<!\!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*([^)\s]+)\s*\)")
INLINE_CODE = re.compile(r"`[^`]*`")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text):
    """Yields (line number, line) outside fenced code blocks."""
    fence = None
    for n, line in enumerate(text.splitlines(), 1):
        s = line.lstrip()
        if fence:
            if s.startswith(fence):
                fence = None
            continue
        if s.startswith("```") or s.startswith("~~~"):
            fence = s[:3]
            continue
        yield n, line


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen = {}
        out = set()
        with open(path, encoding="utf-8") as f:
            for _, line in prose_lines(f.read()):
                m = HEADING.match(line)
                if not m:
                    continue
                a = slug(m.group(2))
                if a in seen:
                    seen[a] += 1
                    a = "%s-%d" % (a, seen[a])
                else:
                    seen[a] = 0
                out.add(a)
        _anchors[path] = out
    return _anchors[path]


def check(md):
    bad = []
    with open(md, encoding="utf-8") as f:
        text = f.read()
    # Fenced blocks blanked and inline code emptied (newlines kept), so a
    # link whose text runs over a line break is still found.
    lines = [""] * (text.count("\n") + 1)
    for n, line in prose_lines(text):
        lines[n - 1] = line
    prose = INLINE_CODE.sub(lambda m: "\n" * m.group(0).count("\n"), "\n".join(lines))
    for m in LINK.finditer(prose):
        n = prose.count("\n", 0, m.start(1)) + 1
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
        where = "%s:%d: %s" % (os.path.relpath(md, ROOT), n, target)
        if not os.path.exists(dest):
            bad.append(where + ": no such file")
            continue
        if anchor and dest.endswith(".md") and anchor not in anchors(dest):
            bad.append(where + ": no such heading")
    return bad


def main(args):
    files = [os.path.abspath(a) for a in args]
    if not files:
        files = [os.path.join(ROOT, "README.md")]
        for d, _, names in os.walk(os.path.join(ROOT, "docs")):
            files += [os.path.join(d, x) for x in sorted(names) if x.endswith(".md")]
    bad = []
    for md in files:
        bad += check(md)
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
