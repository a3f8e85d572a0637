#!/usr/bin/env python3
"""The symbol-level dependency graph of a build, and the rules the layout
keeps (docs/architecture.md).

Reads BUILD/compile_commands.json, runs nm on every object it lists whose
source is product code (daemon/, kernels/, client/, common/: not tests/), and links
each undefined global symbol of an object to the object that defines it.
That gives a graph of source files, and by their folders a graph of
folders.  Checks:

  - no cycle between folders (a folder is a source file's directory);
  - no file-level cycle (strongly connected set) of more than MAX_SCC files;
  - no global symbol defined in two source files;
  - no product source compiled into more than one object, except variants
    of one kernel file compiled with other instruction-set flags, which
    define symbols of their own (listed in VARIANTS);
  - no file under daemon/ or kernels/ includes anything of client/ but its
    public headers (client/include/, what gets installed).

    depgraph.py BUILD_DIR [--max-scc N] [--dot FILE] [--report]

Exit status 0 when every rule holds, 1 with the violations on stdout,
2 on a usage or tool error.  --report prints the folder graph and the
largest file cycles even when the rules hold.
"""
import argparse
import collections
import json
import os
import subprocess
import sys

PRODUCT = ("daemon/", "kernels/", "client/", "common/")
# One source, several objects by design: SIMD variants whose symbols differ
# by a macro (matmul_avx512.c is the avx512 and the avx512vnni set,
# matmul_avx2.c the avx2 and the avx2vnni set), and the
# dtype table the CUDA module (a dlopen'ed .so whose version script exports
# only its entry point) carries a copy of, as libexlclient.so (hidden
# visibility: only its API is exported) carries the framing scanner's.
VARIANTS = {"kernels/cpu/matmul_avx512.c", "kernels/cpu/matmul_avx2.c", "kernels/formats/dtype.c", "common/msgscan.c"}
# Every program has one.
PER_PROGRAM = {"main"}


# Folders whose files may include from client/ only its public headers.
SERVER_SIDE = ("daemon/", "kernels/")
CLIENT_PUBLIC = "client/include/"


def include_violations(root):
    """Includes from daemon/ or kernels/ that reach into client/ past its
    public header folder, as 'file:line: include' strings.  An include is
    resolved as the compiler would: next to the file first, then from the
    project root (client/include/ is on the include path too, so a bare
    "exlclient.h" is the public one)."""
    out = []
    for top in SERVER_SIDE:
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in names:
                if not name.endswith((".c", ".h", ".cu", ".cuh", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        t = line.strip()
                        if not t.startswith("#") or "include" not in t or '"' not in t:
                            continue
                        inc = t.split('"')[1]
                        cands = [os.path.normpath(os.path.join(dirpath, inc)),
                                 os.path.normpath(os.path.join(root, inc))]
                        hit = next((c for c in cands if os.path.exists(c)), None)
                        if not hit:
                            continue
                        hrel = os.path.relpath(hit, root)
                        if hrel.startswith("client/") and not hrel.startswith(CLIENT_PUBLIC):
                            out.append(f"{rel}:{n}: includes {hrel}")
    return out


def product_path(src, root):
    rel = os.path.relpath(src, root)
    return rel if rel.startswith(PRODUCT) else None


def nm_symbols(obj):
    """(defined, undefined) global symbol sets of one object, from one nm."""
    out = subprocess.run(["nm", "-P", "-g", obj], capture_output=True, text=True,
                         check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) < 2:
            continue
        (undefined if f[1] in ("U", "w", "v") else defined).add(f[0])
    return defined, undefined


def strongly_connected(nodes, edges):
    """Tarjan's algorithm, iterative; a list of sets."""
    index, low, on_stack, stack, sccs = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                scc = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    scc.add(w)
                    if w == v:
                        break
                sccs.append(scc)
    return sccs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--max-scc", type=int, default=4)
    ap.add_argument("--dot", help="write the folder graph as Graphviz dot")
    ap.add_argument("--report", action="store_true")
    a = ap.parse_args()

    cc_path = os.path.join(a.build, "compile_commands.json")
    try:
        commands = json.load(open(cc_path))
    except (OSError, ValueError) as e:
        print(f"depgraph: {cc_path}: {e}", file=sys.stderr)
        return 2
    root = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

    objects = collections.defaultdict(list)  # source -> objects
    for c in commands:
        src = os.path.normpath(os.path.join(c["directory"], c["file"]))
        rel = product_path(src, root)
        # Test programs may compile product sources into themselves (the
        # libFuzzer targets do, instrumented): not the product's objects.
        if not rel or c["output"].startswith("tests/"):
            continue
        obj = os.path.join(c["directory"], c["output"])
        if not os.path.exists(obj):
            print(f"depgraph: {obj} is not built (ninja -C {a.build} first)", file=sys.stderr)
            return 2
        objects[rel].append(obj)

    problems = []
    defines = collections.defaultdict(set)  # symbol -> sources
    uses = collections.defaultdict(set)     # source -> symbols
    for src, objs in sorted(objects.items()):
        if len(objs) > 1 and src not in VARIANTS:
            problems.append(f"{src} is compiled into {len(objs)} objects: "
                            + ", ".join(os.path.relpath(o, a.build) for o in objs))
        for obj in objs:
            try:
                d, u = nm_symbols(obj)
            except (OSError, subprocess.CalledProcessError) as e:
                print(f"depgraph: nm {obj}: {e}", file=sys.stderr)
                return 2
            for s in d:
                defines[s].add(src)
            uses[src] |= u

    for sym, srcs in sorted(defines.items()):
        if len(srcs) > 1 and sym not in PER_PROGRAM:
            problems.append(f"global symbol {sym} is defined in " + ", ".join(sorted(srcs)))

    edges = collections.defaultdict(set)
    for src, syms in uses.items():
        for s in syms:
            for d in defines.get(s, ()):
                if d != src:
                    edges[src].add(d)
    nodes = set(objects)
    for scc in strongly_connected(nodes, edges):
        if len(scc) > a.max_scc:
            problems.append(f"a cycle of {len(scc)} files (over {a.max_scc}): "
                            + " ".join(sorted(scc)))

    folder = lambda s: os.path.dirname(s)
    fedges = collections.defaultdict(set)
    for s, ds in edges.items():
        for d in ds:
            if folder(s) != folder(d):
                fedges[folder(s)].add(folder(d))
    fnodes = {folder(s) for s in nodes}
    for scc in strongly_connected(fnodes, fedges):
        if len(scc) > 1:
            problems.append("a cycle between folders: " + " ".join(sorted(scc)))

    for v in include_violations(root):
        problems.append("client/ reached past its public headers: " + v)

    if a.dot:
        with open(a.dot, "w") as f:
            f.write("digraph folders {\n")
            for s in sorted(fedges):
                for d in sorted(fedges[s]):
                    f.write(f'  "{s}" -> "{d}";\n')
            f.write("}\n")
    if a.report or problems:
        print(f"{len(nodes)} product sources, {sum(len(v) for v in edges.values())} file "
              f"dependencies, {len(fnodes)} folders")
        for s in sorted(fedges):
            print(f"  {s} -> {' '.join(sorted(fedges[s]))}")
    for p in problems:
        print("FAIL " + p)
    if not problems:
        print(f"depgraph: no folder cycle, no file cycle over {a.max_scc}, no symbol defined "
              f"twice, no source compiled twice, no include of client/ internals from the "
              f"daemon or kernels ({len(nodes)} sources)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
