#!/usr/bin/env python3
"""Import graph between the top-level modules of the crate (from `crate::` paths in each
file, comments ignored), and the cycles in it. usage: python3 tools/import_graph.py [src]
For the files of one module folder, see tools/inner_graph.py."""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "src"


def targets(text):
    """The first segment of every path after `crate::`, groups `crate::{a, b::c}` included."""
    text = re.sub(r"//[^\n]*", "", text)
    out = []
    for m in re.finditer(r"\bcrate::", text):
        rest = text[m.end():]
        if rest.startswith("{"):
            depth = 0
            for i, ch in enumerate(rest):
                depth += ch == "{"
                depth -= ch == "}"
                if depth == 0:
                    break
            out += [p.strip().split("::")[0] for p in re.split(r",(?![^{]*\})", rest[1:i])]
        else:
            name = re.match(r"[A-Za-z_]\w*", rest)
            if name:
                out.append(name.group(0))
    return [t for t in out if t]


edges = {}
for dirpath, _, files in os.walk(root):
    for f in files:
        if not f.endswith(".rs"):
            continue
        path = os.path.join(dirpath, f)
        module = os.path.relpath(path, root)[:-3].split(os.sep)[0]
        if module in ("lib", "main"):
            continue
        for t in targets(open(path).read()):
            if t != module and t[0].islower() and t != "self":
                edges.setdefault(module, set()).add(t)

for k in sorted(edges):
    print(f"{k} -> {', '.join(sorted(edges[k]))}")
found = set()


def dfs(node, stack):
    for nxt in edges.get(node, ()):
        if nxt in stack:
            found.add(" -> ".join(stack[stack.index(nxt):] + [nxt]))
        else:
            dfs(nxt, stack + [nxt])


for n in list(edges):
    dfs(n, [n])
print("cycles:", ", ".join(sorted(found)) or "none")
sys.exit(1 if found else 0)
