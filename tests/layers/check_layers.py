#!/usr/bin/env python3
"""Check the source tree against its layers.

usage: check_layers.py [--nm NM] [--include-edges] REPO_ROOT BUILD_DIR

Four checks, all from what the build produced and what is on disk:

  symbols   every object file named in BUILD_DIR/compile_commands.json is read
            with nm; a symbol one of our files uses and another of our files
            defines must lie in a layer the user may use (LAYERS below).
  includes  every #include "..." in a .c or .h under SCAN_DIRS is resolved
            against the includer's folder and the build's include dirs; the
            header's folder decides its layer, with the same rule.
  cycles    the file graph (A -> B when A uses a symbol B defines) must have
            no cycle between distinct .c files, anywhere, within one folder too.
  size      no .c file under SIZE_DIRS may have more than MAX_LINES lines.

Exit status 0 with one summary line, or 1 with one line per violation.
"""

import argparse
import collections
import json
import os
import re
import shlex
import subprocess
import sys

# --------------------------------------------------------------------------
# The layer table.  Each row: layer name, the folders (relative to the repo
# root) that belong to it, and the layers it may use besides itself.  A file
# belongs to the row with the longest matching folder; "daemon" catches the
# daemon root (main.c loop.c dispatch.c) and any folder of daemon/ that is
# not listed.  Files under no row (tests/, build/proto/, ...) are not checked
# and are not layers: they may use anything and what they define is ignored.
# --------------------------------------------------------------------------
BELOW_APP = ("data", "io", "cluster", "config", "core", "common", "public")

LAYERS = [
    # name      folders                 may use
    ("public",  ["client/include"],     ()),
    ("common",  ["common"],             ("public",)),
    ("core",    ["daemon/core"],        ("common", "public")),
    ("data",    ["daemon/data"],        ("core", "common", "public")),
    ("io",      ["daemon/io"],          ("core", "common", "public")),
    ("cluster", ["daemon/cluster"],     ("core", "common", "public")),
    ("config",  ["daemon/config"],      ("core", "common", "public")),
    ("app",     ["daemon/app"],         BELOW_APP),
    ("ops",     ["daemon/ops"],         ("app",) + BELOW_APP),
    ("daemon",  ["daemon"],             ("ops", "app") + BELOW_APP),
    ("client",  ["client"],             ("common", "public")),
]

# Folders whose .c and .h files are scanned for includes and sizes.
SCAN_DIRS = ("common", "client", "daemon")
SIZE_DIRS = SCAN_DIRS
MAX_LINES = 1000

# Symbols that several programs each define for themselves.
IGNORED_SYMBOLS = {"main"}

# --------------------------------------------------------------------------

ALLOWED = {name: set(uses) | {name} for name, _, uses in LAYERS}
_FOLDERS = sorted(((folder.rstrip("/") + "/", name)
                   for name, folders, _ in LAYERS for folder in folders),
                  key=lambda row: -len(row[0]))

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def layer_of(rel):
    """The layer of a path relative to the repo root, or None."""
    if rel is None:
        return None
    for folder, name in _FOLDERS:
        if rel.startswith(folder):
            return name
    return None


class Tree:
    def __init__(self, root, build):
        self.root = os.path.realpath(root)
        self.build = os.path.realpath(build)

    def rel(self, path):
        """Path relative to the repo root, or None for files outside it or
        inside the build dir (generated code)."""
        path = os.path.realpath(path)
        if path == self.build or path.startswith(self.build + os.sep):
            return None
        if not path.startswith(self.root + os.sep):
            return None
        return os.path.relpath(path, self.root).replace(os.sep, "/")


# ----------------------------------------------------------- compile database

def _arguments(entry):
    if "arguments" in entry:
        return list(entry["arguments"])
    return shlex.split(entry.get("command", ""))


def _output_of(entry, args):
    if entry.get("output"):
        return entry["output"]
    for i, arg in enumerate(args):
        if arg == "-o" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("-o") and len(arg) > 2:
            return arg[2:]
    return None


def _include_dirs(args, directory):
    dirs = []
    i = 0
    while i < len(args):
        arg = args[i]
        for flag in ("-iquote", "-isystem", "-I"):
            if arg == flag and i + 1 < len(args):
                dirs.append(args[i + 1])
                i += 1
                break
            if arg.startswith(flag) and len(arg) > len(flag):
                dirs.append(arg[len(flag):])
                break
        i += 1
    return [os.path.normpath(os.path.join(directory, d)) for d in dirs]


def read_compile_db(tree):
    """[(source abs path, object abs path or None, include dirs)]"""
    path = os.path.join(tree.build, "compile_commands.json")
    with open(path) as f:
        entries = json.load(f)
    out = []
    for entry in entries:
        directory = entry.get("directory", tree.build)
        args = _arguments(entry)
        src = os.path.normpath(os.path.join(directory, entry["file"]))
        obj = _output_of(entry, args)
        if obj is not None:
            obj = os.path.normpath(os.path.join(directory, obj))
        out.append((src, obj, _include_dirs(args, directory)))
    return out


# -------------------------------------------------------------------- symbols

_DEFINED = set("ABCDGRSTVWiu")
_UNDEFINED = set("Uvw")


def read_symbols(nm, obj):
    """(defined globals, undefined) of one object file."""
    res = subprocess.run([nm, "-P", obj], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError("%s %s: %s" % (nm, obj, res.stderr.strip()))
    defined, undefined = set(), set()
    for line in res.stdout.splitlines():
        fields = line.split()
        if len(fields) < 2 or len(fields[1]) != 1:
            continue
        name, kind = fields[0], fields[1]
        if kind in _UNDEFINED:
            undefined.add(name)
        elif kind in _DEFINED:
            defined.add(name)
    return defined, undefined


# ------------------------------------------------------------------- includes

def git_ignored(root, paths):
    """The paths git ignores under root (build trees a tool left in the
    source tree, e.g. pip's client/python/build/); none outside a repo."""
    if not paths or not os.path.isdir(os.path.join(root, ".git")) and \
            not os.path.isfile(os.path.join(root, ".git")):
        return set()
    try:
        p = subprocess.run(["git", "-C", root, "check-ignore", "--stdin"], input="\n".join(paths),
                           capture_output=True, text=True)
    except OSError:
        return set()
    return set(p.stdout.split("\n")) - {""}


def scan_files(tree, dirs, exts):
    found = []
    for top in dirs:
        base = os.path.join(tree.root, top)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.endswith(exts):
                    found.append(os.path.join(dirpath, name))
    ignored = git_ignored(tree.root, [os.path.relpath(f, tree.root) for f in found])
    return [f for f in found if os.path.relpath(f, tree.root) not in ignored]


def resolve_include(name, includer, own_dirs, all_dirs):
    for d in [os.path.dirname(includer)] + own_dirs + all_dirs:
        cand = os.path.normpath(os.path.join(d, name))
        if os.path.isfile(cand):
            return cand
    return None


def count_lines(path):
    with open(path, "rb") as f:
        data = f.read()
    n = data.count(b"\n")
    if data and not data.endswith(b"\n"):
        n += 1
    return n


# --------------------------------------------------------------------- cycles

def strongly_connected(graph):
    """Tarjan's algorithm, iterative. graph: node -> set(nodes)."""
    index, low, on_stack, stack, sccs = {}, {}, set(), [], []
    counter = [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                sccs.append(sorted(comp))
    return sccs


def _shortest_path(graph, src, dst, allowed):
    prev = {src: None}
    queue = collections.deque([src])
    while queue:
        node = queue.popleft()
        if node == dst:
            path = []
            while node is not None:
                path.append(node)
                node = prev[node]
            return path[::-1]
        for nxt in sorted(graph.get(node, ())):
            if nxt in allowed and nxt not in prev:
                prev[nxt] = node
                queue.append(nxt)
    return None


def find_cycles(graph):
    """Cycles that together cover every edge lying on a cycle: for each such
    edge u -> v, the shortest way back from v to u.  Each cycle is a list of
    nodes starting at its smallest, without the closing repeat."""
    cycles, seen = [], set()
    for comp in strongly_connected(graph):
        if len(comp) < 2:
            continue
        members = set(comp)
        for u in comp:
            for v in sorted(graph.get(u, ())):
                if v not in members or v == u:
                    continue
                back = _shortest_path(graph, v, u, members)
                cycle = [u] + back[:-1]
                k = cycle.index(min(cycle))
                cycle = tuple(cycle[k:] + cycle[:k])
                if cycle not in seen:
                    seen.add(cycle)
                    cycles.append(list(cycle))
    cycles.sort(key=lambda c: (len(c), c))
    return cycles


# ---------------------------------------------------------------------- check

def check(root, build, nm="nm", include_edges=False):
    """Returns (violations, files, edges, warnings)."""
    tree = Tree(root, build)
    violations, warnings = [], []
    db = read_compile_db(tree)
    all_dirs = []
    for _, _, dirs in db:
        for d in dirs:
            if d not in all_dirs:
                all_dirs.append(d)

    # Symbols, per source file (a file built into several targets has
    # several objects; their symbols are merged).
    defined_by = collections.defaultdict(set)    # symbol -> {rel}
    uses = collections.defaultdict(set)          # rel -> {symbol}
    own_dirs = {}                                # rel -> include dirs
    objects = 0
    for src, obj, dirs in db:
        rel = tree.rel(src)
        if layer_of(rel) is None:
            continue
        own_dirs.setdefault(rel, dirs)
        if obj is None:
            warnings.append("layers: warning: no object for %s" % rel)
            continue
        if not os.path.isfile(obj):
            warnings.append("layers: warning: %s not built (%s)" % (rel, obj))
            continue
        defined, undefined = read_symbols(nm, obj)
        objects += 1
        for sym in defined:
            defined_by[sym].add(rel)
        uses[rel] |= undefined
    if objects == 0:
        violations.append("layers: no object files of ours found via %s"
                          % os.path.join(tree.build, "compile_commands.json"))

    sym_edges = collections.defaultdict(set)     # rel -> {rel}
    for user in sorted(uses):
        ulayer = layer_of(user)
        for sym in sorted(uses[user]):
            if sym in IGNORED_SYMBOLS:
                continue
            definers = defined_by.get(sym, set()) - {user}
            if not definers or user in defined_by.get(sym, ()):
                continue
            # Several definers (separate programs): the linker takes the
            # one the user may see, so judge by those when there are any.
            fitting = {d for d in definers if layer_of(d) in ALLOWED[ulayer]}
            for definer in sorted(fitting or definers):
                sym_edges[user].add(definer)
                dlayer = layer_of(definer)
                if dlayer not in ALLOWED[ulayer]:
                    violations.append(
                        "layers: %s uses %s (%s): %s may not use %s"
                        % (user, sym, definer, ulayer, dlayer))

    # Includes.
    inc_edges = collections.defaultdict(set)
    scanned = scan_files(tree, SCAN_DIRS, (".c", ".h"))
    for path in scanned:
        rel = tree.rel(path)
        ulayer = layer_of(rel)
        if ulayer is None:
            continue
        with open(path, errors="replace") as f:
            text = f.read()
        for name in _INCLUDE_RE.findall(text):
            target = resolve_include(name, path, own_dirs.get(rel, []),
                                     all_dirs)
            trel = tree.rel(target) if target else None
            tlayer = layer_of(trel)
            if tlayer is None or trel == rel:
                continue
            inc_edges[rel].add(trel)
            if tlayer not in ALLOWED[ulayer]:
                violations.append(
                    "layers: %s includes \"%s\" (%s): %s may not use %s"
                    % (rel, name, trel, ulayer, tlayer))

    # Cycles between .c files.
    graph = collections.defaultdict(set)
    for user, targets in sym_edges.items():
        graph[user] |= targets
    if include_edges:
        sources = {tree.rel(p) for p in scanned if p.endswith(".c")}
        for user, headers in inc_edges.items():
            if not user.endswith(".c"):
                continue
            for header in headers:
                impl = header[:-2] + ".c"
                if impl in sources and impl != user:
                    graph[user].add(impl)
    for cycle in find_cycles(graph):
        violations.append("layers: cycle: %s"
                          % " -> ".join(cycle + [cycle[0]]))

    # Size.
    for path in scan_files(tree, SIZE_DIRS, (".c",)):
        n = count_lines(path)
        if n > MAX_LINES:
            violations.append("layers: %s: %d lines (at most %d)"
                              % (tree.rel(path), n, MAX_LINES))

    files = set(uses) | {tree.rel(p) for p in scanned}
    files.discard(None)
    edges = {(a, b) for a, bs in sym_edges.items() for b in bs}
    edges |= {(a, b) for a, bs in inc_edges.items() for b in bs}
    return violations, len(files), len(edges), warnings


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("root", help="repository root")
    ap.add_argument("build", help="build dir holding compile_commands.json")
    ap.add_argument("--nm", default=os.environ.get("NM", "nm"))
    ap.add_argument("--include-edges", action="store_true",
                    help="count A.c including B.h as A.c -> B.c for cycles")
    args = ap.parse_args(argv)
    violations, files, edges, warnings = check(
        args.root, args.build, nm=args.nm, include_edges=args.include_edges)
    for line in warnings:
        print(line, file=sys.stderr)
    for line in violations:
        print(line)
    print("layers: %d files, %d edges, %d violations"
          % (files, edges, len(violations)))
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
