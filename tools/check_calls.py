#!/usr/bin/env python3
"""check_calls.py — the coordinator's files call each other one way: no circle.

    tools/check_calls.py            check; print each circle; exit 1 if any
    tools/check_calls.py --graph    also print the file-to-file calls with their counts

check_layers.py holds the includes to their layers; this holds the calls. A file "calls"
another when a function defined in the first names a non-static function defined in the
second. A call through a function pointer (the worker table's listener, the process
supervision's stop hook, the API's handlers) is not a call here: it is the interface the
callee owns, and registering it is how a lower module tells a higher one of events without
calling up into it. Functions are found as tools/long_functions.py finds them (the project's
.clang-format layout). Every git-tracked .c file under coordinator/ is read.
"""
import collections
import os
import re
import subprocess
import sys

HEAD = re.compile(r'^[A-Za-z_][^;=]*\b([A-Za-z_]\w*)\s*\([^;]*$')
CALL = re.compile(r'\b([A-Za-z_]\w*)\s*\(')


def functions(path):
    """(name, is_static, body) of every function defined in path."""
    lines = open(path, encoding='utf-8', errors='replace').read().split('\n')
    out, start, name = [], None, None
    for i, line in enumerate(lines):
        if start is None:
            m = HEAD.match(line)
            if m and not line.startswith(('static const', 'typedef', 'struct', 'enum', 'union')):
                name, start = m.group(1), i
        elif line == '}':
            out.append((name, lines[start].startswith('static'), '\n'.join(lines[start:i + 1])))
            start = None
    return out


def circles(graph):
    """Strongly connected groups of more than one file (Tarjan, iterative)."""
    index, low, on, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    group.append(w)
                    if w == v:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def main():
    root = subprocess.run(['git', 'rev-parse', '--show-toplevel'], capture_output=True,
                          text=True, check=True).stdout.strip()
    os.chdir(root)
    files = subprocess.run(['git', 'ls-files', 'coordinator/*.c'], capture_output=True,
                           text=True, check=True).stdout.split()
    defs, bodies = {}, {}
    for f in files:
        bodies[f] = functions(f)
        for name, static, _ in bodies[f]:
            if not static:
                defs[name] = f
    calls = collections.Counter()
    for f, fns in bodies.items():
        local = {name for name, _, _ in fns}
        for name, _, body in fns:
            for callee in set(CALL.findall(body)):
                if callee in defs and defs[callee] != f and callee not in local:
                    calls[(f, defs[callee])] += 1
    graph = collections.defaultdict(set)
    for (a, b) in calls:
        graph[a].add(b)
        graph[b]
    if '--graph' in sys.argv:
        for (a, b), n in sorted(calls.items()):
            print(f'{a} -> {b}: {n}')
    found = circles(graph)
    for group in found:
        print('circle: ' + ' <-> '.join(group))
    print(f'check_calls: {len(files)} files, {len(calls)} file-to-file calls, '
          f'{len(found)} circles')
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
