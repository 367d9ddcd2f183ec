#!/usr/bin/env python3
"""Structure checks of src/ (DEVELOPERS.md, "Code layout"): no import circles between modules
and no function over ~150 lines.

    python3 scripts/check-structure.py [--exclude PREFIX ...] [-v]

Import edges are read from `use` trees and `crate::` / `super::` paths (re-exports of a
parent `mod.rs` count as the child that defines the name; test modules are ignored); a
circle is a strongly connected component of that graph. Function lengths run from the `fn`
line to its closing brace. Both are text heuristics for reviewing, not a parser: exit status
1 when something is found outside the excluded prefixes (e.g. `--exclude src/chromdata`).
"""
import os
import re
import sys
from collections import defaultdict

LIMIT = 150


def import_graph(SRC):
    files = {}
    for dp, dn, fn in os.walk(SRC):
        for f in fn:
            if f.endswith(".rs"):
                p = os.path.join(dp, f)
                rel = os.path.relpath(p, SRC)[:-3].split(os.sep)
                if rel[-1] in ("mod", "lib", "main"):
                    rel = rel[:-1]
                files[tuple(rel)] = p

    def strip(text):
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        text = re.sub(r'r#*"(.|\n)*?"#*', '""', text)
        text = re.sub(r'"(\\.|[^"\\])*"', '""', text)
        text = re.sub(r"//[^\n]*", "", text)
        return text

    def expand(tree):
        tree = tree.strip()
        m = re.match(r"^(.*?)\{(.*)\}$", tree, re.S)
        if not m:
            return [tree.split(" as ")[0].strip()]
        prefix, inner = m.group(1), m.group(2)
        parts, depth, cur = [], 0, ""
        for ch in inner:
            if ch == "{": depth += 1
            if ch == "}": depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur); cur = ""
            else:
                cur += ch
        parts.append(cur)
        out = []
        for p in parts:
            if p.strip():
                out += [prefix + q for q in expand(p)]
        return out

    reexports = defaultdict(dict)  # module -> name -> child
    for mod, p in files.items():
        t = strip(open(p).read())
        for m in re.finditer(r"pub(?:\([^)]*\))?\s+use\s+([^;]+);", t):
            for path in expand(m.group(1)):
                segs = [s for s in path.replace(" ", "").split("::") if s]
                if segs and segs[0] not in ("crate", "super", "self") and len(segs) >= 2 and mod + (segs[0],) in files:
                    reexports[mod][segs[-1]] = segs[0]

    def resolve(base, segs):
        """base: module tuple of the scope; returns the file module the path lands in."""
        if segs[0] == "crate":
            cur, rest = (), segs[1:]
        else:
            cur, rest = base, segs
            while rest and rest[0] in ("super", "self"):
                if rest[0] == "super":
                    cur = cur[:-1]
                rest = rest[1:]
        # descend through file modules
        while rest and cur + (rest[0],) in files:
            cur = cur + (rest[0],); rest = rest[1:]
        # inline modules (e.g. dataset::paths) stay in the file; re-exports go to the child
        if rest and rest[0] in reexports.get(cur, {}):
            cur = cur + (reexports[cur][rest[0]],)
        return cur

    edges = defaultdict(set)
    for mod, p in files.items():
        t = strip(open(p).read())
        # drop test modules
        t = re.sub(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", "\x00", t)
        out, depth, skip = [], 0, None
        for ch in t:
            if ch == "\x00":
                skip = depth; depth += 1; continue
            if ch == "{": depth += 1
            if ch == "}":
                depth -= 1
                if skip is not None and depth == skip:
                    skip = None; continue
            if skip is None:
                out.append(ch)
        t = "".join(out)
        # scopes: inline `mod x {` shifts `super`
        scope_marks = []
        for m in re.finditer(r"\bmod\s+(\w+)\s*\{", t):
            depth = 1; i = m.end()
            while i < len(t) and depth:
                depth += (t[i] == "{") - (t[i] == "}"); i += 1
            scope_marks.append((m.start(), i, m.group(1)))
        def base_at(pos):
            for s, e, name in scope_marks:
                if s <= pos < e:
                    return mod + (name,)
            return mod
        paths = []
        for m in re.finditer(r"\buse\s+([^;]+);", t):
            for path in expand(m.group(1)):
                paths.append((m.start(), path))
        for m in re.finditer(r"\b(?:crate|super)(?:::\w+)+", t):
            paths.append((m.start(), m.group(0)))
        # a parent's bare paths into its own children (not its `pub use` re-exports)
        children = [k[-1] for k in files if k[:-1] == mod and len(k) == len(mod) + 1]
        if children:
            nopub = re.sub(r"pub(?:\([^)]*\))?\s+use\s+[^;]+;", "", t)
            nopub = re.sub(r"\bmod\s+\w+\s*;", "", nopub)
            for m in re.finditer(r"(?<![:\w])(" + "|".join(children) + r")::\w+", nopub):
                paths.append((m.start(), "self::" + m.group(0)))
            for m in re.finditer(r"\buse\s+(" + "|".join(children) + r")::([^;]+);", nopub):
                paths.append((m.start(), "self::" + m.group(1) + "::x"))
        for pos, path in paths:
            segs = [s for s in path.replace(" ", "").split("::") if s and s != "*"]
            if not segs or segs[0] not in ("crate", "super", "self"):
                continue
            if segs[0] == "self" and len(segs) == 1:
                continue
            tgt = resolve(base_at(pos), segs)
            # inline module scope: map back to the file module
            while tgt not in files and tgt:
                tgt = tgt[:-1]
            if tgt != mod and tgt:
                    edges[mod].add(tgt)

    return files, edges


def cycles(files, edges):
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(comp)

    sys.setrecursionlimit(10000)
    for v in list(files):
        if v not in index:
            strong(v)
    return sccs


FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"C"\s+)?fn\s+(\w+)')


def long_functions(root):
    found = []
    for dp, dn, fn in os.walk(root):
        for f in sorted(fn):
            if not f.endswith(".rs"):
                continue
            p = os.path.join(dp, f)
            lines = open(p).read().split("\n")
            for i, line in enumerate(lines):
                m = FN.match(line)
                if not m:
                    continue
                depth, started, j = 0, False, i
                while j < len(lines):
                    s = re.sub(r'"(\\.|[^"\\])*"', '""', lines[j])
                    s = re.sub(r"'(\\.|[^'\\])'", "''", s).split("//")[0]
                    for ch in s:
                        if ch == "{":
                            depth += 1
                            started = True
                        elif ch == "}":
                            depth -= 1
                    if started and depth <= 0:
                        break
                    if not started and s.rstrip().endswith(";"):
                        break
                    j += 1
                if started and j - i + 1 > LIMIT:
                    found.append((j - i + 1, p, i + 1, m.group(7)))
    return sorted(found, reverse=True)


def main():
    args = sys.argv[1:]
    exclude = [args[i + 1].rstrip("/") for i, a in enumerate(args) if a == "--exclude"]
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    files, edges = import_graph("src")
    name = lambda m: "::".join(m) or "crate"
    excluded = lambda path: any(path == e or path.startswith(e + "/") for e in exclude)
    bad = 0
    print("import circles:")
    for comp in cycles(files, edges):
        skip = all(excluded(files[m]) for m in comp)
        bad += not skip
        print(f"  {'(excluded) ' if skip else ''}{' <-> '.join(sorted(name(m) for m in comp))}")
        for a in comp:
            for b in sorted(edges[a]):
                if b in comp:
                    print(f"      {name(a)} -> {name(b)}")
    print(f"functions over {LIMIT} lines:")
    for n, p, line, fname in long_functions("src"):
        skip = excluded(p)
        bad += not skip
        print(f"  {'(excluded) ' if skip else ''}{n:5d} {p}:{line} {fname}")
    if "-v" in args:
        print("import edges:")
        for m in sorted(files):
            print(f"  {name(m)}: {', '.join(sorted(name(x) for x in edges[m]))}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
