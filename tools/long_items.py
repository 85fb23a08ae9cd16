#!/usr/bin/env python3
"""Functions longer than N lines (signature to closing brace; default 60) and files longer than
400 lines. usage: python3 tools/long_items.py [src] [N]"""
import os, re, sys
root = sys.argv[1] if len(sys.argv) > 1 else 'src'
N = int(sys.argv[2]) if len(sys.argv) > 2 else 60
M = 400
for dirpath, _, files in os.walk(root):
    for f in sorted(files):
        if not f.endswith('.rs'): continue
        p = os.path.join(dirpath, f)
        lines = open(p).read().split('\n')
        if len(lines) - 1 > M: print(f"FILE {p}: {len(lines)-1} lines")
        for i, line in enumerate(lines):
            if re.match(r'\s*(pub(\([^)]*\))?\s+)?(async\s+)?(unsafe\s+)?fn\s+\w+', line) and not line.strip().startswith('//'):
                indent = len(line) - len(line.lstrip())
                # find the line with the opening brace, then the closing brace at same indent
                j = i
                while j < len(lines) and '{' not in lines[j] and not lines[j].rstrip().endswith(';'):
                    j += 1
                if j < len(lines) and lines[j].rstrip().endswith(';') and '{' not in lines[j]:
                    continue
                k = j + 1
                while k < len(lines):
                    l = lines[k]
                    if l.startswith(' ' * indent + '}') and (len(l) - len(l.lstrip()) == indent):
                        break
                    k += 1
                n = k - i + 1
                if n > N:
                    name = re.search(r'fn\s+(\w+)', line).group(1)
                    print(f"FN {p}:{i+1} {name}: {n} lines")
