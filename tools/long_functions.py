#!/usr/bin/env python3
"""long_functions.py [LIMIT] [PATH...] — C functions longer than LIMIT lines (default 150).

A function may be longer when the comment just above it says why and names the guide
("past the ~150-line guide"); those are not listed.

A function starts at a line that begins with a non-blank, non-'#' character and ends in ')' or
'{' after a parameter list, and ends at the first line that is exactly '}'. Good enough for code
formatted by the project's .clang-format. Prints "lines file:line name", longest first.
"""
import re
import subprocess
import sys

limit = int(sys.argv[1]) if len(sys.argv) > 1 else 150
paths = sys.argv[2:] or subprocess.run(
    ['git', 'ls-files', '*.c'], capture_output=True, text=True, check=True).stdout.split()
head = re.compile(r'^[A-Za-z_][^;=]*\b([A-Za-z_]\w*)\s*\([^;]*$')
rows = []
for p in paths:
    try:
        lines = open(p, encoding='utf-8', errors='replace').read().split('\n')
    except OSError:
        continue
    start = name = None
    for i, line in enumerate(lines):
        if start is None:
            m = head.match(line)
            if m and not line.startswith(('static const', 'typedef', 'struct', 'enum', 'union')):
                name, start = m.group(1), i
        elif line == '}':
            n = i - start + 1
            above = ' '.join(lines[max(0, start - 4):start])
            if n > limit and '150-line' not in above:
                rows.append((n, '%s:%d' % (p, start + 1), name))
            start = None
        elif line.startswith(('#', 'static ', 'int ', 'void ')) and not lines[start].rstrip().endswith(('{', ')', ',')):
            start = None
for n, where, name in sorted(rows, reverse=True):
    print('%5d %s %s' % (n, where, name))
