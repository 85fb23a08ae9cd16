#!/usr/bin/env python3
"""Imports run one way (DESIGN.md): no cycle between the top-level modules of the crate, nor
between the children of any module folder. For the top level and for every folder under it,
prints the import graph between its children and a `cycles:` line; exits 1 if any has a cycle.

usage: python3 tools/import_graph.py [src]

An edge `a -> b` in a folder means a file of child `a` names child `b` through a `crate::`,
`super::` or `self::` path (groups `{x, y::{z}}` included, comments ignored). A path to an
item of the folder's own module file (`super::build_forwarder`) is no edge: that file is the
parent. `tests` modules are left out: tests may reach anything. `lib.rs` and `main.rs` (the
crate root and the binary) are the top of everything and are left out too."""
import os
import re
import sys

PATH_START = re.compile(r"\b(crate|super|self)::")
SEGMENT = re.compile(r"\s*([A-Za-z_]\w*|\*)\s*")


def strip_comments(text):
    return re.sub(r"//[^\n]*", "", text)


def parse_tail(text, pos):
    """The paths that continue at `pos` (just after a `::`): a list of segment lists, a group
    `{a, b::{c, d}}` giving one path per member."""
    if text.startswith("{", pos):
        depth, end = 0, pos
        for end in range(pos, len(text)):
            depth += text[end] == "{"
            depth -= text[end] == "}"
            if depth == 0:
                break
        inner, paths, start, depth = text[pos + 1:end], [], 0, 0
        for i, ch in enumerate(inner + ","):
            depth += ch == "{"
            depth -= ch == "}"
            if ch == "," and depth == 0:
                member = inner[start:i]
                if member.strip():
                    offset = len(member) - len(member.lstrip())
                    paths += parse_tail(member, offset)
                start = i + 1
        return paths
    m = SEGMENT.match(text, pos)
    if not m:
        return [[]]
    name = m.group(1)
    if text.startswith("::", m.end()):
        return [[name] + rest for rest in parse_tail(text, m.end() + 2)]
    return [[name]]


def referenced_modules(text, module):
    """Every path the text names, made absolute (from the crate root) for a file whose module
    path is `module`."""
    text = strip_comments(text)
    out = []
    for m in PATH_START.finditer(text):
        if m.start() > 0 and text[m.start() - 1] == ":":
            continue  # `x::super::` is not a path of ours
        kind, pos, base = m.group(1), m.end(), None
        if kind == "crate":
            base = []
        elif kind == "self":
            base = list(module)
        else:
            ups = 1
            while text.startswith("super::", pos):
                ups, pos = ups + 1, pos + len("super::")
            base = list(module[: len(module) - ups]) if ups <= len(module) else []
        out += [base + tail for tail in parse_tail(text, pos)]
    return out


def module_path(root, path):
    """The module path of a source file: src/throttle/layer/queue.rs -> [throttle, layer,
    queue]; a `mod.rs` is its folder's module."""
    parts = os.path.relpath(path, root)[:-3].split(os.sep)
    if parts[-1] == "mod":
        parts = parts[:-1]
    return parts


def children(folder):
    """The modules a folder holds: its `.rs` files and its subfolders."""
    names = set()
    for entry in os.listdir(folder):
        if entry.endswith(".rs"):
            names.add(entry[:-3])
        elif os.path.isdir(os.path.join(folder, entry)):
            names.add(entry)
    return names - {"mod", "lib", "main", "tests"}


def graph(root, folder):
    """The edges between the children of `folder` (a folder of the crate under `root`)."""
    prefix = [] if folder == root else os.path.relpath(folder, root).split(os.sep)
    kids = children(folder)
    depth = len(prefix)
    edges = {}
    for dirpath, _, files in os.walk(folder):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            module = module_path(root, path)
            if module in (["lib"], ["main"]) or "tests" in module or len(module) <= depth:
                continue
            child = module[depth]
            with open(path) as source:
                text = source.read()
            for target in referenced_modules(text, module):
                if len(target) > depth and target[:depth] == prefix:
                    name = target[depth]
                    if name in kids and name != child:
                        edges.setdefault(child, set()).add(name)
    return edges


def cycles(edges):
    """Each cycle once, written from its smallest member."""
    found = set()

    def visit(node, stack):
        for nxt in edges.get(node, ()):
            if nxt in stack:
                cycle = stack[stack.index(nxt):]
                first = cycle.index(min(cycle))
                cycle = cycle[first:] + cycle[:first]
                found.add(" -> ".join(cycle + [cycle[0]]))
            else:
                visit(nxt, stack + [nxt])

    for node in list(edges):
        visit(node, [node])
    return sorted(found)


def main():
    root = (sys.argv[1] if len(sys.argv) > 1 else "src").rstrip("/")
    folders = [root] + sorted(
        os.path.join(d, sub) for d, subs, _ in os.walk(root) for sub in subs
    )
    failed = False
    for folder in folders:
        edges = graph(root, folder)
        print(f"== {folder}")
        for k in sorted(edges):
            print(f"{k} -> {', '.join(sorted(edges[k]))}")
        found = cycles(edges)
        print("cycles:", ", ".join(found) or "none")
        failed = failed or bool(found)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
