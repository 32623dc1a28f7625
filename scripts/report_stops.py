#!/usr/bin/env python3
"""Count the "stops" along the executed call graph of one root function.

Input: a callgrind profile of one run (best made with --demangle=no so that
each generic instantiation of a std/dependency function keeps its own
symbol). The program's own functions are those whose source file lies under
--workspace; a closure counts as part of its enclosing function, and std /
dependency functions are see-through (a workspace function reached through
them is a child of the workspace function that called into them, at that
call's source line). From the root (the workspace function whose name
contains --root), walk depth-first, children in the order of the call site's
source line in the caller, each function visited once. A stop is a step from
a caller into a callee in a different source file; it is a return when that
file was already visited earlier in the walk.

Callgrind keeps one list of callees per function, not per caller: a std
function that the root's own callers use too (a closure's call_once) joins
their callees to the root's, and the walk wanders into `main` and the
command-line parsing. `--exclude REGEX` leaves such functions out (the
root's callers: `--exclude 'vramscope::main|run_and_end'`). Recording with
`--separate-callers=N` keeps contexts apart but loses the edges into
threads the root starts (the loading and the analyses run on scoped
threads), so the whole graph with the root's callers left out is the
better count.

Usage: python3 scripts/report_stops.py CALLGRIND_OUT --root SUBSTRING
           --workspace /path/to/checkout/crates [--exclude REGEX] [--tree]
"""

import argparse
import os
import re
import sys
from collections import defaultdict

# ---------------------------------------------------------------- demangling

_ESC = {
    "SP": "@", "BP": "*", "RF": "&", "LT": "<", "GT": ">", "LP": "(",
    "RP": ")", "C": ",",
}


def _unescape(ident):
    if ident.startswith("_$"):
        ident = ident[1:]
    out, i = [], 0
    while i < len(ident):
        if ident.startswith("..", i):
            out.append("::")
            i += 2
        elif ident[i] == "$":
            j = ident.find("$", i + 1)
            if j < 0:
                out.append(ident[i:])
                break
            code = ident[i + 1:j]
            if code in _ESC:
                out.append(_ESC[code])
            elif code.startswith("u"):
                try:
                    out.append(chr(int(code[1:], 16)))
                except ValueError:
                    out.append(ident[i:j + 1])
            else:
                out.append(ident[i:j + 1])
            i = j + 1
        elif ident[i] == ".":
            out.append("-")
            i += 1
        else:
            out.append(ident[i])
            i += 1
    return "".join(out)


def demangle(sym):
    """Legacy Rust demangling, the hash dropped; other symbols unchanged."""
    s = re.sub(r"\.llvm\.\d+$", "", sym)
    if not s.startswith("_ZN"):
        return sym
    i, parts = 3, []
    while i < len(s) and s[i] != "E":
        m = re.match(r"\d+", s[i:])
        if not m:
            return sym
        n = int(m.group(0))
        i += len(m.group(0))
        parts.append(s[i:i + n])
        i += n
    if parts and re.fullmatch(r"h[0-9a-f]{16}", parts[-1]):
        parts.pop()
    return "::".join(_unescape(p) for p in parts)


def enclosing(name):
    """A closure's enclosing function: drop every {{closure}} segment."""
    return re.sub(r"(::\{\{closure\}\})+", "", name)


# ------------------------------------------------------------------- parsing

def parse(path):
    """Return (files_of, calls): files_of[sym] = {file: selfcost};
    calls[sym] = [(callee_sym, callsite_line, callsite_file)]."""
    names = {"fl": {}, "fn": {}, "ob": {}}
    kind = {"fl": "fl", "fi": "fl", "fe": "fl", "cfi": "fl", "cfl": "fl",
            "fn": "fn", "cfn": "fn", "ob": "ob", "cob": "ob"}
    files_of = defaultdict(lambda: defaultdict(int))
    calls = defaultdict(list)
    fl = fi = fn = None
    cfn = cfl = None
    pending_call = False
    last_line = 0

    def resolve(key, val):
        table = names[kind[key]]
        m = re.match(r"\((\d+)\)\s*(.*)$", val)
        if m:
            if m.group(2):
                table[m.group(1)] = m.group(2)
            return table.get(m.group(1), "?")
        return val

    def line_of(tok):
        nonlocal last_line
        if tok == "*":
            return last_line
        if tok[0] in "+-":
            last_line += int(tok)
        else:
            last_line = int(tok, 0)
        return last_line

    with open(path, errors="replace") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not line or line[0] == "#":
                continue
            c = line[0]
            if c.isdigit() or c in "+-*":
                tok = line.split()[0]
                pos = line_of(tok)
                if pending_call:
                    calls[fn].append((cfn, pos, fi or fl))
                    pending_call = False
                    cfn = cfl = None
                elif fn is not None:
                    cost = sum(int(x) for x in line.split()[1:2] if x.isdigit())
                    files_of[fn][fl] += cost
                continue
            key, eq, val = line.partition("=")
            if not eq:
                continue  # header line "key: value"
            if key == "fl":
                fl = resolve(key, val)
                fi = None
            elif key in ("fi", "fe"):
                fi = resolve(key, val)
                if fi == fl:
                    fi = None
            elif key == "fn":
                fn = resolve(key, val)
                fi = None
                files_of[fn][fl] += 0
            elif key in ("cfi", "cfl"):
                cfl = resolve(key, val)
            elif key == "cfn":
                cfn = resolve(key, val)
            elif key in ("ob", "cob"):
                resolve(key, val)
            elif key == "calls":
                if cfn is not None and cfl is not None:
                    files_of[cfn][cfl] += 0
                pending_call = True
            elif key in ("jump", "jcnd"):
                pending_call = False
    return files_of, calls


# -------------------------------------------------------------------- graph

def build(files_of, calls, workspace):
    ws = os.path.realpath(workspace).rstrip("/") + "/"

    def in_ws(p):
        return p is not None and os.path.realpath(p).startswith(ws)

    def file_of(sym):
        fs = files_of.get(sym, {})
        own = [p for p in fs if in_ws(p)]
        pick = own or list(fs)
        if not pick:
            return None
        return max(pick, key=lambda p: fs[p])

    node_of, node_file = {}, {}
    for sym in set(files_of) | set(calls):
        p = file_of(sym)
        if in_ws(p):
            # Under --separate-callers=N a symbol carries its callers
            # ("fn'caller'caller's caller"): one node per function, but
            # the see-through walk below keeps each context's own callees.
            n = enclosing(demangle(sym.split("'")[0]))
            node_of[sym] = n
            node_file.setdefault(n, os.path.relpath(os.path.realpath(p), os.path.dirname(ws.rstrip("/"))))

    memo = {}
    inlined_sites = set()

    def files_of_caller(sym):
        return file_of(sym)

    def through(sym):
        """Workspace nodes reached from a non-workspace symbol through
        non-workspace symbols only."""
        if sym in memo:
            return memo[sym]
        memo[sym] = set()
        seen, stack, found = {sym}, [sym], set()
        while stack:
            s = stack.pop()
            for callee, _, _ in calls.get(s, ()):
                if callee in node_of:
                    found.add(node_of[callee])
                elif callee not in seen:
                    seen.add(callee)
                    stack.append(callee)
        memo[sym] = found
        return found

    children = defaultdict(dict)  # node -> {child: min call line}
    for sym, lst in calls.items():
        caller = node_of.get(sym)
        if caller is None:
            continue
        for callee, pos, site in lst:
            targets = [node_of[callee]] if callee in node_of else through(callee)
            if targets and site != files_of_caller(sym):
                inlined_sites.add((caller, pos))
            for t in targets:
                if t == caller:
                    continue
                old = children[caller].get(t)
                if old is None or pos < old:
                    children[caller][t] = pos
    return node_file, children, inlined_sites


def walk(root, node_file, children, exclude=None):
    left_out = {n for n in node_file if exclude and n != root and re.search(exclude, n)}
    visited, files, order = {root} | left_out, [node_file[root]], []
    stops = returns = 0
    tree = []

    def visit(n, depth):
        nonlocal stops, returns
        kids = sorted(children.get(n, {}).items(), key=lambda kv: (kv[1], kv[0]))
        for child, line in kids:
            if child in visited:
                continue
            visited.add(child)
            mark = ""
            if node_file[child] != node_file[n]:
                stops += 1
                if node_file[child] in files:
                    returns += 1
                    mark = "RETURN"
                else:
                    files.append(node_file[child])
                    mark = "STOP"
            tree.append((depth, line, child, node_file[child], mark))
            visit(child, depth + 1)

    sys.setrecursionlimit(100000)
    visit(root, 1)
    return stops, returns, files, visited - left_out, tree


def crate_of(rel):
    parts = rel.split("/")
    return parts[1] if len(parts) > 1 and parts[0] == "crates" else parts[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    ap.add_argument("--root", required=True, help="substring of the root function's name")
    ap.add_argument("--workspace", required=True, help="the checkout's crates/ directory")
    ap.add_argument("--exclude", help="regex of functions the walk leaves out (the root's own callers)")
    ap.add_argument("--tree", action="store_true", help="print the walk")
    a = ap.parse_args()

    files_of, calls = parse(a.profile)
    node_file, children, inlined_sites = build(files_of, calls, a.workspace)
    cands = sorted(n for n in node_file if a.root in n)
    if not cands:
        sys.exit(f"no workspace function matches {a.root!r}")
    exact = [n for n in cands if n.endswith("::" + a.root) or n == a.root]
    pool = exact or cands
    if len(pool) > 1:
        sys.exit("ambiguous root, candidates:\n  " + "\n  ".join(pool))
    root = pool[0]

    stops, returns, files, visited, tree = walk(root, node_file, children, a.exclude)
    crates = []
    for f in files:
        c = crate_of(f)
        if c not in crates:
            crates.append(c)
    print(f"root: {root}  ({node_file[root]})")
    print(f"functions visited: {len(visited)}")
    print(f"stops: {stops}")
    print(f"returns: {returns}")
    print(f"distinct files: {len(files)}")
    print(f"crates ({len(crates)}): " + " -> ".join(crates))
    # The same walk at the crates' level: a step into another crate, a
    # return when that crate was visited before, and the functions each
    # crate runs (what the report crate itself computes).
    cstops = creturns = 0
    seen = [crate_of(node_file[root])]
    parent_crate = {}
    for depth, line, n, f, mark in tree:
        parent_crate[depth] = crate_of(f)
        caller = parent_crate.get(depth - 1, crate_of(node_file[root]))
        if crate_of(f) != caller:
            cstops += 1
            if crate_of(f) in seen:
                creturns += 1
            else:
                seen.append(crate_of(f))
    per_crate = defaultdict(int)
    for n in visited:
        per_crate[crate_of(node_file[n])] += 1
    print(f"crate stops: {cstops}, of them returns: {creturns}")
    print("functions per crate: " + ", ".join(f"{c} {k}" for c, k in sorted(per_crate.items(), key=lambda x: -x[1])))
    odd = sorted((c, l) for c, l in inlined_sites if c in visited)
    if odd:
        print(f"note: {len(odd)} call site(s) lie in code inlined from another "
              "file (#[inline(always)]); their line orders children only roughly")
        if a.tree:
            for c, l in odd:
                print(f"  {c} (line {l})")
    print("files in order of first visit:")
    for i, f in enumerate(files, 1):
        print(f"  {i:3d}. {f}")
    if a.tree:
        print("walk (depth, call line, function, file, mark):")
        for depth, line, n, f, mark in tree:
            print(f"{'  ' * depth}{line:5d} {n}  [{f}] {mark}")


if __name__ == "__main__":
    main()
