#!/usr/bin/env python3
"""Checks the links of the repository's Markdown pages, without the network.

Every relative link ([text](path), ![alt](path), [text](path#anchor), [text](#anchor)) must
lead to a file or directory of the repository, and an anchor to a heading of the Markdown page
it names (GitHub's anchor rules: lower case, punctuation dropped, spaces to dashes, -1, -2 for
repeats). Links with a scheme (https:, mailto:) are not followed. Exits 1 naming each broken
link with its file and line.

    python3 tools/check_links.py [ROOT]    # ROOT: the repository (default: this script's ..)
    python3 tools/check_links.py --self-test   # shows that it finds each kind of broken link
"""

import os
import re
import sys

SKIP_DIRS = {".git", "target", "node_modules", "outbox"}
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def markdown_files(root):
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            if name.endswith(".md"):
                yield os.path.join(folder, name)


def prose_lines(path, keep_code=False):
    """(line number, text) of the lines outside fenced code blocks, inline code removed
    unless `keep_code` (headings may hold it)."""
    fenced = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if not fenced:
                yield number, line if keep_code else re.sub(r"`[^`]*`", "", line)


def slug(heading):
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    found, seen = set(), {}
    for _, line in prose_lines(path, keep_code=True):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(root):
    root = os.path.abspath(root)
    cache = {}
    for page in markdown_files(root):
        for number, line in prose_lines(page):
            for target in LINK.findall(line):
                if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                    continue
                path, _, anchor = target.partition("#")
                full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
                where = f"{os.path.relpath(page, root)}:{number}"
                if not full.startswith(root + os.sep) and full != root:
                    yield f"{where}: {target}: leaves the repository"
                elif not os.path.exists(full):
                    yield f"{where}: {target}: no such file"
                elif anchor:
                    if not full.endswith(".md"):
                        yield f"{where}: {target}: an anchor into a file that is not Markdown"
                        continue
                    if full not in cache:
                        cache[full] = anchors(full)
                    if anchor not in cache[full]:
                        yield f"{where}: {target}: no heading #{anchor} in {os.path.relpath(full, root)}"


def self_test():
    """The checker on a small tree of its own: each broken kind is found, good links pass."""
    import tempfile

    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        pages = {
            "README.md": "# Top\n[ok](docs/a.md#a-heading) [ok](docs/a.md) [web](https://x.test/y)\n"
            "[gone](docs/missing.md) [bad anchor](docs/a.md#nowhere)\n"
            "```\n[in code](not/checked.md)\n```\n",
            "docs/a.md": "# A `heading`\n## Same\n## Same\n[ok](#same-1) [ok](../README.md#top)\n"
            "[out](../../outside.md) [self](#missing-here)\n",
        }
        for name, text in pages.items():
            with open(os.path.join(root, name), "w", encoding="utf-8") as f:
                f.write(text)
        found = sorted(broken_links(root))
        expected = [
            "README.md:3: docs/missing.md: no such file",
            "README.md:3: docs/a.md#nowhere: no heading #nowhere in docs/a.md",
            "docs/a.md:5: ../../outside.md: leaves the repository",
            "docs/a.md:5: #missing-here: no heading #missing-here in docs/a.md",
        ]
        if found != sorted(expected):
            print(f"check_links: self-test FAILED:\n  found    {found}\n  expected {sorted(expected)}", file=sys.stderr)
            return 1
    print("check_links: self-test ok (4 broken links found, good ones passed)")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    here = os.path.dirname(os.path.abspath(__file__))
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..")
    broken = list(broken_links(root))
    for line in broken:
        print(f"check_links: {line}", file=sys.stderr)
    pages = sum(1 for _ in markdown_files(root))
    if broken:
        print(f"check_links: {len(broken)} broken link(s) in {pages} pages", file=sys.stderr)
        return 1
    print(f"check_links: ok ({pages} pages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
