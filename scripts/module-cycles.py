#!/usr/bin/env python3
"""Lists pairs of top-level modules of one crate that name each other (a module cycle).

Usage: scripts/module-cycles.py [crates/NAME ...]   (default: every crate under crates/)
Exit status 1 when a pair is found. A module is a file or directory right under `src/`;
`crate::x` (in `use` or in a path) inside module `y` is an edge y -> x.
"""
from __future__ import annotations

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
REF = re.compile(r"\bcrate::(?:\{([^}]*)\}|([a-z_][a-z0-9_]*))")


def top_module(src: pathlib.Path, file: pathlib.Path) -> str | None:
    rel = file.relative_to(src)
    if rel.parts[0] in ("lib.rs", "main.rs"):
        return None
    return rel.parts[0].removesuffix(".rs")


def edges(crate: pathlib.Path) -> dict[str, set[str]]:
    src = crate / "src"
    graph: dict[str, set[str]] = {}
    for file in src.rglob("*.rs"):
        me = top_module(src, file)
        if me is None:
            continue
        text = file.read_text(errors="replace")
        # Tests may reach anywhere; only the module's own code counts.
        text = re.split(r"#\[cfg\(test\)\]\s*mod\s+tests", text)[0]
        for group, single in REF.findall(text):
            names = [single] if single else [p.strip().split("::")[0] for p in group.split(",")]
            for name in names:
                if name and name != me and name not in ("self", "super"):
                    graph.setdefault(me, set()).add(name)
    return graph


def main() -> int:
    crates = [pathlib.Path(a) for a in sys.argv[1:]] or sorted((ROOT / "crates").iterdir())
    found = 0
    for crate in crates:
        if not (crate / "src").is_dir():
            continue
        graph = edges(crate)
        for a in sorted(graph):
            for b in sorted(graph[a]):
                if a < b and a in graph.get(b, set()):
                    print(f"{crate.name}: {a} <-> {b}")
                    found += 1
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
