#!/usr/bin/env python3
"""Checks that the broker crate's top-level modules depend on each other downward only.

ARCHITECTURE.md promises that modules import only the ones below them. This reads every
`.rs` file under broker/src, collects the `crate::<module>` paths (in `use` lines and inline,
`#[cfg(test)] mod tests` blocks excepted) and `super::` paths that leave a top-level module,
and fails with the circle it found if two top-level modules import each other, directly or
through others. Doc comments are skipped: a link in prose is not a dependency.

Usage: scripts/check-module-cycles.py [SRC_DIR...]   (default: broker/src)
"""

import re
import sys
from pathlib import Path


def module_of(src: Path, path: Path) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return parts[0]


def code_lines(text: str) -> str:
    cut = text.find("#[cfg(test)]\nmod tests {")
    if cut >= 0:
        text = text[:cut]
    lines = []
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("//"):
            continue
        lines.append(line.split("//", 1)[0] if "\"" not in line else line)
    return "\n".join(lines)


def edges(src: Path) -> dict[str, set[str]]:
    modules = {module_of(src, p) for p in src.rglob("*.rs")}
    modules -= {"lib", "main"}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for path in src.rglob("*.rs"):
        here = module_of(src, path)
        if here in ("lib", "main"):
            continue
        text = code_lines(path.read_text())
        targets = set(re.findall(r"\bcrate::(\w+)", text))
        for group in re.findall(r"\bcrate::\{([^}]*)\}", text):
            targets |= {item.split("::")[0].strip() for item in group.split(",") if item.strip()}
        graph[here] |= {t for t in targets if t in modules and t != here}
    return graph


def file_edges(directory: Path) -> dict[str, set[str]]:
    """Files of one directory module and the sibling files each imports through `super::`
    (directly, or through a name `mod.rs` re-exports)."""
    files = {p.stem for p in directory.glob("*.rs") if p.stem != "mod"}
    exported: dict[str, str] = {}
    mod_rs = directory / "mod.rs"
    if mod_rs.exists():
        for file, names in re.findall(r"pub use (\w+)::\{([^}]*)\}", mod_rs.read_text()):
            for name in names.split(","):
                exported[name.strip()] = file
        for file, name in re.findall(r"pub use (\w+)::(\w+);", mod_rs.read_text()):
            exported[name] = file
    graph: dict[str, set[str]] = {f: set() for f in files}
    for f in files:
        text = code_lines((directory / f"{f}.rs").read_text())
        names = set(re.findall(r"\bsuper::(\w+)", text))
        for group in re.findall(r"\bsuper::\{([^}]*)\}", text):
            names |= {item.split("::")[0].strip() for item in group.split(",") if item.strip()}
        for name in names:
            target = name if name in files else exported.get(name)
            if target and target != f and target in files:
                graph[f].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def check(src: Path) -> bool:
    graph = edges(src)
    failed = False
    cycle = find_cycle(graph)
    if cycle:
        print("module circle in " + str(src) + ": " + " -> ".join(cycle))
        failed = True
    directories = sorted(d for d in src.rglob("*") if d.is_dir())
    for directory in directories:
        cycle = find_cycle(file_edges(directory))
        if cycle:
            print(f"file circle in {directory}: " + " -> ".join(cycle))
            failed = True
    if not failed:
        print(f"{src}: {len(graph)} top-level modules and {len(directories)} directories, no import circle")
    return not failed


def main() -> int:
    sources = [Path(a) for a in sys.argv[1:]] or [Path("broker/src")]
    results = [check(src) for src in sources]
    if not all(results):
        print("Move the shared item below both (see ARCHITECTURE.md, 'Module layers').")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
