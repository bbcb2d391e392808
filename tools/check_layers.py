#!/usr/bin/env python3
"""check_layers.py — the include graph keeps its one-way layers and has no circle.

    tools/check_layers.py            check; print each violation; exit 1 if any
    tools/check_layers.py --graph    also print the folder-to-folder arrows with their counts

The layers, bottom to top (a folder may include its own headers and those of the layers it
lists; DESIGN.md: common <- kernels <- engine <- worker, coordinator):

    common/base                      nothing else
    common/format, common/tok        base (tok also format: it reads GGUF metadata)
    common/grammar                   base (GBNF grammars and their matching over token bytes)
    common/model                     base, format
    common/wire                      base, model (sampling parameters travel on the wire)
    common/plan                      base, format, model
    common/config                    base, format, model, plan (mesh.toml: the plan's input)
    kernels                          common
    engine                           common, kernels
    worker                           common, kernels, engine (and never the coordinator)
    coordinator/plan, coordinator/sched
                                     common, kernels, engine
    coordinator/api                  the above and coordinator/sched
    coordinator/supervise            the above and coordinator/plan, coordinator/sched
    coordinator/mesh                 the above and coordinator/api, coordinator/supervise
    coordinator/cli                  the above and coordinator/mesh
    tests, bench, tools              anything

Besides the layers: no header may reach itself through its includes (a cycle), and the graph of
folders must have no cycle either. Only #include "..." lines of files git tracks are read.
"""
import collections
import os
import re
import subprocess
import sys

ALLOWED = {
    'common/base': set(),
    'common/format': {'common/base'},
    'common/tok': {'common/base', 'common/format'},
    'common/grammar': {'common/base'},
    'common/model': {'common/base', 'common/format'},
    'common/wire': {'common/base', 'common/model'},
    'common/plan': {'common/base', 'common/format', 'common/model'},
    'common/config': {'common/base', 'common/format', 'common/model', 'common/plan'},
}
COMMON = set(ALLOWED)
ALLOWED['kernels'] = COMMON
ALLOWED['engine'] = COMMON | {'kernels'}
ALLOWED['worker'] = COMMON | {'kernels', 'engine'}
BELOW = COMMON | {'kernels', 'engine'}
ALLOWED['coordinator/plan'] = BELOW
ALLOWED['coordinator/sched'] = BELOW
ALLOWED['coordinator/api'] = BELOW | {'coordinator/sched'}
ALLOWED['coordinator/supervise'] = BELOW | {'coordinator/plan', 'coordinator/sched'}
ALLOWED['coordinator/mesh'] = ALLOWED['coordinator/supervise'] | {'coordinator/api',
                                                                 'coordinator/supervise'}
ALLOWED['coordinator/cli'] = ALLOWED['coordinator/mesh'] | {'coordinator/mesh'}
FREE = ('tests', 'bench', 'tools')


def folder(path):
    parts = path.split('/')
    if parts[0] in ('common', 'coordinator') and len(parts) > 2:
        return parts[0] + '/' + parts[1]
    if parts[0] == 'kernels':
        return 'kernels'
    return parts[0]


def main():
    root = subprocess.run(['git', 'rev-parse', '--show-toplevel'], capture_output=True,
                          text=True, check=True).stdout.strip()
    os.chdir(root)
    files = subprocess.run(['git', 'ls-files', '*.c', '*.h', '*.cu', '*.cuh'],
                           capture_output=True, text=True, check=True).stdout.split()
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
    edges = {}
    for f in files:
        deps = []
        with open(f, encoding='utf-8', errors='replace') as fp:
            for line in fp:
                m = inc.match(line)
                if m and os.path.exists(m.group(1)):
                    deps.append(m.group(1))
        edges[f] = deps

    bad = []
    arrows = collections.Counter()
    for f, deps in edges.items():
        src = folder(f)
        for d in deps:
            dst = folder(d)
            if dst != src:
                arrows[(src, dst)] += 1
            if src in FREE or dst == src:
                continue
            if src not in ALLOWED:
                bad.append('%s: %s is in no layer' % (f, src))
            elif dst not in ALLOWED[src]:
                bad.append('%s includes %s: %s may not depend on %s' % (f, d, src, dst))

    # A cycle among headers: depth-first search over header -> header edges.
    headers = {f: [d for d in deps if d.endswith(('.h', '.cuh'))]
               for f, deps in edges.items() if f.endswith(('.h', '.cuh'))}
    state, stack = {}, []

    def visit(h):
        state[h] = 1
        stack.append(h)
        for d in headers.get(h, []):
            if state.get(d) == 1:
                bad.append('include cycle: ' + ' -> '.join(stack[stack.index(d):] + [d]))
            elif d not in state:
                visit(d)
        stack.pop()
        state[h] = 2

    sys.setrecursionlimit(10000)
    for h in sorted(headers):
        if h not in state:
            visit(h)

    # A cycle among folders.
    graph = collections.defaultdict(set)
    for (a, b) in arrows:
        graph[a].add(b)
    fstate = {}

    def fvisit(a, path):
        fstate[a] = 1
        for b in sorted(graph[a]):
            if fstate.get(b) == 1:
                bad.append('folder cycle: ' + ' -> '.join(path[path.index(b):] + [b]))
            elif b not in fstate:
                fvisit(b, path + [b])
        fstate[a] = 2

    for a in sorted(graph):
        if a not in fstate:
            fvisit(a, [a])

    if '--graph' in sys.argv:
        for (a, b), n in sorted(arrows.items()):
            print('%-18s -> %-18s %d' % (a, b, n))
    for b in bad:
        print(b)
    print('check_layers: %d files, %d folder arrows, %d problems' %
          (len(edges), len(arrows), len(bad)))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
