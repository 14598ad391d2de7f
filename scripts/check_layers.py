#!/usr/bin/env python3
"""Checks the shape of every crate's product code (not its tests): files of at most 800
lines, no import that runs up a floor, no circle of modules.

    python3 scripts/check_layers.py            # every crate under crates/; exit 1 on a finding
    python3 scripts/check_layers.py --graph    # also print each crate's module graph

The rules, inside one crate:
- "Up a floor": a module uses an item defined in an ancestor's own file (lib.rs, or the
  mod.rs / <folder>.rs of a folder it sits in), e.g. `use crate::Ctx` from `cmd/get.rs` where
  `Ctx` is a struct of lib.rs. Shared types live in a module of their own that both sides
  import. Re-exports (`pub use a::B` in lib.rs) resolve to the module that defines them.
- A circle: modules A and B (files, by their module path) that reach each other through
  imports, directly or through others. A module and its own submodules are one unit for
  this check (a parent declares its children).
- Product files of at most 800 lines: `tests.rs`, `tests/`, `benches/`, `examples/` and
  build scripts aside.

The parse is textual (use declarations and `crate::`/`super::` paths in code); it is meant
for this repository's style, not for every Rust file.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 800


def module_files(src: Path):
    """{module path tuple: file} for a crate's src/ (lib.rs or main.rs is the root)."""
    mods = {}
    has_lib = (src / "lib.rs").exists()
    for f in src.rglob("*.rs"):
        rel = f.relative_to(src)
        parts = list(rel.with_suffix("").parts)
        if parts == ["main"] and has_lib:
            continue  # the binary's root, a crate of its own that uses the library
        if parts[-1] in ("lib", "main") and len(parts) == 1:
            parts = []
        elif parts[-1] == "mod":
            parts = parts[:-1]
        if parts and parts[0] == "bin":
            continue
        mods[tuple(parts)] = f
    return mods


def is_test_file(f: Path) -> bool:
    return f.name == "tests.rs" or "tests" in f.parts[:-1] or f.name.endswith("_tests.rs")


def strip_tests(text: str) -> str:
    """The file without `#[cfg(test)] mod ... { ... }` blocks and comments."""
    text = re.sub(r"//[^\n]*", "", text)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def defined_items(text: str):
    """Names of items a file defines itself (not modules), and its re-exports name -> path."""
    items = set(re.findall(
        r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:struct|enum|trait|fn|const|static|type|union)\s+(\w+)",
        text, re.M))
    reexports = {}
    for m in re.finditer(r"^\s*pub(?:\([^)]*\))?\s+use\s+([^;]+);", text, re.M):
        for path, name in expand_use(m.group(1)):
            reexports[name] = path
    return items, reexports


def expand_use(tree: str, prefix=""):
    """`a::{b, c::d as e}` -> [("a::b", "b"), ("a::c::d", "e")]."""
    tree = " ".join(tree.split())
    out = []
    m = re.match(r"^(.*?)::\{(.*)\}$", tree)
    if m:
        base = prefix + m.group(1) + "::"
        depth, cur, parts = 0, "", []
        for ch in m.group(2):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        for p in parts:
            p = p.strip()
            if p:
                out.extend(expand_use(p, base))
        return out
    if tree == "{}" or not tree:
        return out
    name = tree.split(" as ")[-1].strip() if " as " in tree else tree.split("::")[-1]
    path = prefix + tree.split(" as ")[0].strip()
    if name == "self":
        path = path.rsplit("::", 1)[0]
        name = path.split("::")[-1]
    out.append((path, name))
    return out


def check_crate(crate: Path, graph: bool):
    src = crate / "src"
    if not src.is_dir():
        return []
    findings = []
    mods = module_files(src)
    texts = {m: strip_tests(f.read_text()) for m, f in mods.items()}
    own = {m: defined_items(t) for m, t in texts.items()}

    def resolve(mod, path):
        """A path as written in module `mod` -> (module that holds the item, item or None)."""
        parts = path.split("::")
        if parts[0] == "crate":
            base, rest = (), parts[1:]
        elif parts[0] in ("super", "self"):
            base = mod
            while parts and parts[0] in ("super", "self"):
                if parts[0] == "super":
                    base = base[:-1]
                parts = parts[1:]
            rest = parts
        else:
            return None
        cur = tuple(base)
        for depth in range(8):
            i = 0
            while i < len(rest) and cur + (rest[i],) in mods:
                cur = cur + (rest[i],)
                i += 1
            if i >= len(rest):
                return cur, None
            name = rest[i]
            items, reexports = own.get(cur, (set(), {}))
            if name in reexports and name not in items:
                target = reexports[name]
                tparts = target.split("::")
                if tparts[0] not in ("crate", "super", "self"):
                    tparts = list(cur) + tparts if cur + (tparts[0],) in mods else None
                    if tparts is None:
                        return cur, name
                    rest = tparts[len(cur):] + rest[i + 1:]
                    continue
                r = resolve(cur, target)
                if r is None:
                    return cur, name
                cur, _ = r
                rest = [target.split("::")[-1]] + rest[i + 1:]
                if cur + (rest[0],) in mods:
                    continue
                return cur, rest[0]
            return cur, name
        return cur, None

    edges = {m: set() for m in mods}
    for m, text in texts.items():
        f = mods[m]
        n = len(f.read_text().splitlines())
        if n > MAX_LINES and not is_test_file(f.relative_to(src)):
            findings.append(f"{f.relative_to(ROOT)}: {n} lines (over {MAX_LINES})")
        paths = []
        for u in re.finditer(r"\buse\s+((?:crate|super|self)::[^;]+);", text):
            paths.extend(p for p, _ in expand_use(u.group(1)))
        paths.extend(re.findall(r"(?<![\w:])((?:crate|super)(?:::\w+)+)", text))
        for p in paths:
            r = resolve(m, p)
            if r is None:
                continue
            target, item = r
            if target == m:
                continue
            is_ancestor = m[: len(target)] == target and len(target) < len(m)
            if is_ancestor:
                items, _ = own.get(target, (set(), {}))
                if item and item in items:
                    findings.append(
                        f"{f.relative_to(ROOT)}: `{item}` runs up a floor (defined in "
                        f"{mods[target].relative_to(ROOT)})")
                continue
            if m[: len(target)] == target or target[: len(m)] == m:
                continue  # own submodule
            edges[m].add(target)

    # Circles: strongly connected components of more than one module, where a module and its
    # submodules count as one.
    def unit(mod, other):
        """The two modules cut to the level where they differ (siblings under a common parent)."""
        k = 0
        while k < min(len(mod), len(other)) and mod[k] == other[k]:
            k += 1
        return mod[: k + 1], other[: k + 1]

    ugraph = {}
    for a, bs in edges.items():
        for b in bs:
            ua, ub = unit(a, b)
            if ua != ub:
                ugraph.setdefault(ua, set()).add(ub)
                ugraph.setdefault(ub, set())
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in ugraph.get(v, ()):
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
    for v in list(ugraph):
        if v not in index:
            strong(v)
    for comp in sccs:
        names = sorted("::".join(c) or "(root)" for c in comp)
        findings.append(f"{crate.relative_to(ROOT)}: a circle of modules: {' <-> '.join(names)}")
    if graph:
        print(f"# {crate.name}")
        for a in sorted(ugraph):
            for b in sorted(ugraph[a]):
                print(f"  {'::'.join(a) or '(root)'} -> {'::'.join(b) or '(root)'}")
    return findings


def main():
    graph = "--graph" in sys.argv
    findings = []
    for crate in sorted((ROOT / "crates").iterdir()):
        if crate.is_dir():
            findings.extend(check_crate(crate, graph))
    findings = list(dict.fromkeys(findings))
    for f in findings:
        print(f)
    print(f"{len(findings)} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
