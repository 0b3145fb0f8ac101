#!/usr/bin/env python3
"""Lists the uses between a crate's top-level modules and fails on a cycle.

For each crate directory given (default: reader and injector), every file under
src/ belongs to a top-level module (`src/X.rs`, `src/X/**`). A use of another
top-level module is a path `crate::Y...` (brace groups `crate::{Y, Z::w}`
included) or a `super::` chain that climbs to the crate root (`super::super::Y`
in `src/X/z.rs`); names that `src/lib.rs` re-exports (`pub use Y::Name;`) count
as uses of `Y`. Comments, doc links, strings and `$crate` in macros are ignored.
Uses inside `#[cfg(test)]` modules (inline, or files declared `#[cfg(test)] mod x;`)
are test-only: tests may drive a module through a higher layer (a live session,
say), so they are listed but left out of the cycle check unless --with-tests.

Prints one `crate: a -> b  (first/file.rs:line)` line per edge (test-only edges
marked `[tests only]`), then either `crate: acyclic` or each cycle (a strongly
connected component), and exits 1 when any crate has a cycle.

Usage: scripts/module-graph.py [--with-tests] [CRATE_DIR ...]
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_code(text):
    """`text` with comments, strings and char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    blank = lambda s: re.sub(r"[^\n]", " ", s)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(text[i:j]))
            i = j
        elif (m := re.match(r'b?r(#*)"', text[i:])) and (i == 0 or not re.match(r"\w", text[i - 1])):
            end = text.find('"' + m.group(1), i + m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append(blank(text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(blank(text[i : j + 1]))
            i = j + 1
        elif c == "'" and (m := re.match(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])'", text[i:])):
            out.append(blank(m.group(0)))
            i += m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def group_heads(text, start):
    """The first identifiers of each path in the brace group opening at `start`."""
    heads, depth, item_start = [], 0, start + 1
    for j in range(start, len(text)):
        ch = text[j]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                heads.append(text[item_start:j])
                break
        elif ch == "," and depth == 1:
            heads.append(text[item_start:j])
            item_start = j + 1
    names = []
    for h in heads:
        m = re.match(r"\s*(" + IDENT + ")", h)
        if m:
            names.append(m.group(1))
    return names


TEST_MOD = re.compile(
    r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*([{;])"
)


def test_only_children(path):
    """Names of the file modules that `path` declares `#[cfg(test)] mod x;`."""
    with open(path, encoding="utf-8") as f:
        text = strip_code(f.read())
    return {m.group(1) for m in TEST_MOD.finditer(text) if m.group(2) == ";"}


def uses_in_file(path, file_depth, test_file):
    """(name, line, test only) for every path in `path` naming something at the crate root.

    `file_depth` is the module depth of the file (1 for `src/X.rs` and
    `src/X/mod.rs`, 2 for `src/X/y.rs`, ...); `test_file` says the whole file
    is compiled for tests only.
    """
    with open(path, encoding="utf-8") as f:
        text = strip_code(f.read())
    line_at = lambda pos: text.count("\n", 0, pos) + 1
    test_mods = {m.start(1) for m in TEST_MOD.finditer(text) if m.group(2) == "{"}
    # Inline `mod name {` blocks deepen the module path for `super::`.
    mods = []  # (brace depth at which the body starts, test only) per open inline module
    depth = 0
    found = []
    i = 0
    root_path = re.compile(r"(?<![\w$])((?:crate::)|(?:super::)+)")
    mod_open = re.compile(r"\bmod\s+(" + IDENT + r")\s*\{")
    ident = re.compile(IDENT)
    while i < len(text):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            if mods and mods[-1][0] == depth:
                mods.pop()
            depth -= 1
        m = mod_open.match(text, i)
        if m:
            mods.append((depth + 1, m.start(1) in test_mods))
            depth += 1
            i = m.end()
            continue
        m = root_path.match(text, i)
        if m:
            prefix = m.group(1)
            here = file_depth + len(mods)
            at_root = prefix == "crate::" or prefix.count("super::") == here
            if at_root:
                if text.startswith("{", m.end()):
                    names = group_heads(text, m.end())
                else:
                    nm = ident.match(text, m.end())
                    names = [nm.group(0)] if nm else []
                in_test = test_file or any(t for _, t in mods)
                for name in names:
                    found.append((name, line_at(i), in_test))
            i = m.end()
            continue
        i += 1
    return found


def top_level_modules(src):
    """{module name: [(file path, module depth, test only)]} of the crate at `src`."""
    modules = {}
    for entry in sorted(os.listdir(src)):
        full = os.path.join(src, entry)
        if entry.endswith(".rs") and entry not in ("lib.rs", "main.rs"):
            modules.setdefault(entry[:-3], []).append((full, 1, False))
        elif os.path.isdir(full):
            for dirpath, _, files in sorted(os.walk(full)):
                rel = os.path.relpath(dirpath, src).split(os.sep)
                parent = os.path.join(dirpath, "mod.rs")
                tests = test_only_children(parent) if os.path.exists(parent) else set()
                for f in sorted(files):
                    if not f.endswith(".rs"):
                        continue
                    depth = len(rel) + (0 if f == "mod.rs" else 1)
                    test = f[:-3] in tests
                    modules.setdefault(entry, []).append((os.path.join(dirpath, f), depth, test))
    return modules


def reexports(src, modules):
    """{name re-exported by lib.rs: module it comes from}."""
    lib = os.path.join(src, "lib.rs")
    if not os.path.exists(lib):
        return {}
    with open(lib, encoding="utf-8") as f:
        text = strip_code(f.read())
    out = {}
    for m in re.finditer(r"\bpub\s+use\s+(?:crate::)?(" + IDENT + r")::([^;]*);", text):
        module, tail = m.group(1), m.group(2)
        if module not in modules:
            continue
        for name in re.findall(IDENT + r"(?=\s*(?:,|\}|$))", tail.strip()):
            out[name] = module
        if (alias := re.search(r"\bas\s+(" + IDENT + r")\s*$", tail)):
            out[alias.group(1)] = module
    return out


def cycles(nodes, edges):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
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
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def check(crate_dir, with_tests):
    """Prints the crate's module graph; True when it is acyclic."""
    name = os.path.basename(os.path.normpath(crate_dir))
    src = os.path.join(crate_dir, "src")
    modules = top_level_modules(src)
    exported = reexports(src, modules)
    edges, test_edges, where = {}, {}, {}
    for module, files in modules.items():
        for path, depth, test_file in files:
            for used, line, in_test in uses_in_file(path, depth, test_file):
                target = used if used in modules else exported.get(used)
                if target is None or target == module:
                    continue
                (test_edges if in_test else edges).setdefault(module, set()).add(target)
                key = (module, target, in_test)
                where.setdefault(key, f"{os.path.relpath(path, crate_dir)}:{line}")
    for a in sorted(set(edges) | set(test_edges)):
        for b in sorted(edges.get(a, set()) | test_edges.get(a, set())):
            if b in edges.get(a, ()):
                print(f"{name}: {a} -> {b}  ({where[(a, b, False)]})")
            else:
                print(f"{name}: {a} -> {b}  [tests only]  ({where[(a, b, True)]})")
    if with_tests:
        for a, bs in test_edges.items():
            edges.setdefault(a, set()).update(bs)
    found = cycles(modules, edges)
    if not found:
        print(f"{name}: acyclic ({len(modules)} modules)")
    for comp in found:
        print(f"{name}: CYCLE among {', '.join(comp)}")
    return not found


def main():
    args = sys.argv[1:]
    with_tests = "--with-tests" in args
    crates = [a for a in args if a != "--with-tests"]
    crates = crates or [os.path.join(ROOT, "reader"), os.path.join(ROOT, "injector")]
    ok = True
    for c in crates:
        ok = check(c, with_tests) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
