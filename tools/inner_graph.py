#!/usr/bin/env python3
"""Import graph between the files and folders of one module folder (e.g. src/throttle), from
`super::` and `crate::<folder>::` paths, and the cycles in it.
usage: python3 tools/inner_graph.py src/throttle"""
import os, re, sys
base = sys.argv[1].rstrip('/')
top = os.path.basename(base)
def paths(text):
    text = re.sub(r'//[^\n]*', '', text)
    out = []
    for m in re.finditer(r'\b((?:super::)+|crate::' + top + r'::)(\{|[A-Za-z_]\w*)', text):
        prefix, first = m.group(1), m.group(2)
        rest = text[m.end() - len(first):]
        if first == '{':
            depth = 0
            for i, ch in enumerate(rest):
                depth += ch == '{'; depth -= ch == '}'
                if depth == 0: break
            names = [n.strip().split('::')[0] for n in re.split(r',(?![^{]*\})', rest[1:i])]
        else:
            names = [first]
        out += [(prefix, n) for n in names if n]
    return out
edges = {}
for dirpath, _, files in os.walk(base):
    for f in files:
        if not f.endswith('.rs'): continue
        p = os.path.join(dirpath, f)
        rel = os.path.relpath(p, base)[:-3].split(os.sep)
        if rel[-1] == 'mod': rel = rel[:-1]
        if rel and rel[-1] == 'tests': continue
        mod = rel  # path under throttle
        if not mod: continue
        child = mod[0]
        for prefix, name in paths(open(p).read()):
            if prefix.startswith('crate::'):
                target = name
            else:
                ups = prefix.count('super::')
                parent = mod[:-ups] if ups <= len(mod) else []
                target = parent[0] if parent else name
            if target != child and target[0].islower() and target not in ('self', 'tests'):
                edges.setdefault(child, set()).add(target)
for k in sorted(edges): print(f"{k} -> {', '.join(sorted(edges[k]))}")
found = set()
def dfs(n, stack):
    for m in edges.get(n, ()):
        if m in stack: found.add(' -> '.join(stack[stack.index(m):] + [m]))
        else: dfs(m, stack + [m])
for n in list(edges): dfs(n, [n])
print('cycles:', ', '.join(sorted(found)) or 'none')
sys.exit(1 if found else 0)
