#!/usr/bin/env python3
"""Checks that the broker crate's top-level modules depend on each other downward only.

ARCHITECTURE.md promises that modules import only the ones below them. This reads every
`.rs` file under each SRC_DIR and collects its imports of other top-level modules: the
`crate::<module>` paths (in `use` lines and inline; `crate::{a, b}` groups count each item)
and the `super::` paths that climb out of a top-level module (`super::x` in `src/y.rs`,
`super::super::x` in `src/y/z.rs`). Doc and line comments are skipped (a link in prose is not
a dependency), and so is everything from the first `#[cfg(test)] mod tests {` of a file on
(tests may reach anywhere). Then it checks, and fails with a sentence saying what to do:

1. No circles, in every SRC_DIR: no two top-level modules import each other, directly or
   through others, and no two files of one directory import each other through `super::`.
2. Layer order, for broker/src only: the fenced block under `## Module layers of the broker
   crate` in ARCHITECTURE.md is the one list of layers. Each row names one or more modules in
   its first column (`api/` is module `api`; a row whose module column is blank continues the
   previous row's description, one whose module column ends in a comma continues on the next
   line); higher rows are higher layers. A module may import modules of its own row and of
   lower rows only. Every top-level module of broker/src (`x.rs` or `x/`, except the crate
   root `lib.rs`) must be in the list, and every name in the list must exist. `main` (the
   binary, `main.rs`) need not be listed; when it is, its `sluice_broker::` imports are
   checked like the others.

Usage: scripts/check-module-cycles.py [SRC_DIR...]   (default: broker/src)
"""

import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
LAYERS_HEADING = "## Module layers of the broker crate"
LAYERED_SRC = ROOT / "broker" / "src"
# The library's name as the binary (main.rs) spells it: its `crate::` is the library's name.
LIBRARY_NAME = "sluice_broker"
WHERE = f"the list under '{LAYERS_HEADING}' in ARCHITECTURE.md"


@dataclass
class Import:
    path: Path  # the importing file
    line: int  # 1-based
    here: str  # the importing top-level module
    target: str  # the imported top-level module


@dataclass
class Row:
    number: int  # 1 = the top row of the block
    line: int  # ARCHITECTURE.md line where the row starts
    names: list[str]
    text: str  # the module column as written

    def describe(self) -> str:
        return f"row {self.number} (`{self.text}`, ARCHITECTURE.md:{self.line})"


def shown(path: Path) -> str:
    """A path as the messages show it: relative to the repository when inside it."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def module_of(src: Path, path: Path) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return parts[0]


def module_path(src: Path, path: Path) -> list[str]:
    """The module path of a file: src/x.rs and src/x/mod.rs are [x], src/x/y.rs is [x, y]."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "mod":
        parts.pop()
    return parts


def code_lines(text: str) -> str:
    """The file's code, with comment lines blanked (so line numbers stay) and everything from
    the first `#[cfg(test)] mod tests {` on cut off."""
    cut = text.find("#[cfg(test)]\nmod tests {")
    if cut >= 0:
        text = text[:cut]
    lines = []
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("//"):
            lines.append("")
            continue
        lines.append(line.split("//", 1)[0] if "\"" not in line else line)
    return "\n".join(lines)


def group_items(text: str, start: int) -> list[str]:
    """The top-level items of the `{...}` group opening at text[start], nested groups kept whole."""
    depth, item, items = 0, "", []
    for ch in text[start:]:
        if ch == "{":
            depth += 1
            if depth == 1:
                continue
        elif ch == "}":
            depth -= 1
            if depth == 0:
                break
        if ch == "," and depth == 1:
            items.append(item)
            item = ""
        else:
            item += ch
    items.append(item)
    return [i.strip() for i in items if i.strip()]


def first_names(text: str, end: int) -> list[str]:
    """The first path segment(s) after a `crate::`-like prefix ending at text[end]: one name,
    or each item of a `{...}` group."""
    rest = text[end:]
    if rest.startswith("{"):
        names = []
        for item in group_items(text, end):
            name = re.match(r"\w+", item)
            if name:
                names.append(name.group(0))
        return names
    name = re.match(r"\w+", rest)
    return [name.group(0)] if name else []


def file_imports(src: Path, path: Path, modules: set[str]) -> list[Import]:
    here = module_of(src, path)
    text = code_lines(path.read_text())
    prefixes = r"\$?\bcrate::"
    if here == "main":
        prefixes = rf"(?:\bcrate|\b{LIBRARY_NAME})::"
    found: list[tuple[int, str]] = []
    for match in re.finditer(prefixes, text):
        found += [(match.start(), name) for name in first_names(text, match.end())]
    depth = len(module_path(src, path))
    for match in re.finditer(r"\b(?:super::)+", text):
        if match.group(0).count("super::") == depth:  # climbs to the crate root
            found += [(match.start(), name) for name in first_names(text, match.end())]
    imports = []
    for offset, name in found:
        if name in modules and name != here:
            line = text.count("\n", 0, offset) + 1
            imports.append(Import(path, line, here, name))
    return sorted(imports, key=lambda i: (i.line, i.target))


def top_level_modules(src: Path) -> set[str]:
    return {module_of(src, p) for p in src.rglob("*.rs")} - {"lib", "main"}


def all_imports(src: Path) -> list[Import]:
    modules = top_level_modules(src)
    imports = []
    for path in sorted(src.rglob("*.rs")):
        if module_of(src, path) == "lib":
            continue
        imports += file_imports(src, path, modules)
    return imports


def edges(src: Path, imports: list[Import]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in top_level_modules(src)}
    for imp in imports:
        if imp.here in graph:
            graph[imp.here].add(imp.target)
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


def read_layers() -> tuple[list[Row], list[str]]:
    """The rows of the layer block in ARCHITECTURE.md, top row first, and the problems found
    reading it (each a sentence)."""
    if not ARCHITECTURE.exists():
        return [], [f"{ARCHITECTURE} does not exist, so there is no list of module layers to check against."]
    lines = ARCHITECTURE.read_text().splitlines()
    try:
        start = lines.index(LAYERS_HEADING)
    except ValueError:
        return [], [f"ARCHITECTURE.md has no heading '{LAYERS_HEADING}': the layer check reads the "
                    "module layers from the fenced block under it; restore the heading."]
    fence = None
    for i in range(start + 1, len(lines)):
        if lines[i].startswith("## "):
            break
        if lines[i].startswith("```"):
            fence = i
            break
    if fence is None:
        return [], [f"ARCHITECTURE.md has no fenced block (```) under '{LAYERS_HEADING}': the layer "
                    "check reads the module layers from it; restore it."]
    rows: list[Row] = []
    problems: list[str] = []
    continues = False  # the previous module column ended in a comma
    for i in range(fence + 1, len(lines)):
        line = lines[i]
        if line.startswith("```"):
            break
        if not line.strip() or line[0].isspace():
            continue  # a blank module column: the previous row's description goes on
        column = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        names = [n.strip() for n in column.split(",") if n.strip()]
        for name in names:
            if not re.fullmatch(r"\w+/?", name):
                problems.append(f"ARCHITECTURE.md:{i + 1}: `{name}` in the module column of the layer "
                                "block is not a module name (write `x` for x.rs, `x/` for a directory, "
                                "separated by commas, then two or more spaces before the description).")
        names = [n.rstrip("/") for n in names]
        if continues and rows:
            rows[-1].names += names
            rows[-1].text += " " + column
        else:
            rows.append(Row(len(rows) + 1, i + 1, names, column))
        continues = column.endswith(",")
    else:
        problems.append(f"the fenced block under '{LAYERS_HEADING}' in ARCHITECTURE.md is never closed.")
    if not rows:
        problems.append(f"the fenced block under '{LAYERS_HEADING}' in ARCHITECTURE.md lists no modules.")
    for row in rows:
        row.text = row.text.rstrip(",")
    return rows, problems


def check_layers(src: Path, imports: list[Import]) -> bool:
    rows, problems = read_layers()
    row_of: dict[str, Row] = {}
    for row in rows:
        for name in row.names:
            if name in row_of:
                problems.append(f"`{name}` is in both {row_of[name].describe()} and {row.describe()} of "
                                f"{WHERE}: keep it in one row only.")
            else:
                row_of[name] = row
    modules = top_level_modules(src)
    for name in sorted(modules - set(row_of)):
        kind = f"{name}/" if (src / name).is_dir() else f"{name}.rs"
        problems.append(f"{shown(src)}/{kind} is a top-level module, but `{name}` is not in "
                        f"{WHERE}: add it to the row of its layer (below every module it imports, "
                        "above every module that imports it).")
    for name, row in sorted(row_of.items()):
        if name not in modules and not (name == "main" and (src / "main.rs").exists()):
            problems.append(f"{WHERE} names `{name}` in {row.describe()}, but "
                            f"{shown(src)} has no {name}.rs or {name}/: remove it from the "
                            "list, or correct the name.")
    for imp in imports:
        here, there = row_of.get(imp.here), row_of.get(imp.target)
        if here is None or there is None or there.number >= here.number:
            continue
        problems.append(
            f"{shown(imp.path)}:{imp.line}: `{imp.here}` imports `{imp.target}`, but "
            f"`{imp.here}` is in {here.describe()} and `{imp.target}` is higher, in "
            f"{there.describe()}. A module may import its own row and the rows below it only: "
            f"move the code `{imp.here}` needs out of `{imp.target}` into `{imp.here}` or a module "
            f"below it, or, if `{imp.target}` really belongs in row {here.number} or lower, move it "
            f"down in {WHERE}.")
    for problem in problems:
        print(problem)
    if not problems:
        print(f"{shown(src)}: {len(modules)} top-level modules in {len(rows)} layers "
              "(ARCHITECTURE.md), every import downward or within its layer")
    return not problems


def check(src: Path) -> bool:
    imports = all_imports(src.resolve())
    graph = edges(src, imports)
    failed = False
    cycle = find_cycle(graph)
    if cycle:
        print("module circle in " + shown(src) + ": " + " -> ".join(cycle)
              + ". Move the shared item below both (see ARCHITECTURE.md, 'Module layers').")
        failed = True
    directories = sorted(d for d in src.rglob("*") if d.is_dir())
    for directory in directories:
        cycle = find_cycle(file_edges(directory))
        if cycle:
            print(f"file circle in {shown(directory)}: " + " -> ".join(cycle)
                  + ". Move the shared item into a file both import.")
            failed = True
    if not failed:
        print(f"{shown(src)}: {len(graph)} top-level modules and {len(directories)} directories, no import circle")
    if src.resolve() == LAYERED_SRC:
        failed = not check_layers(src.resolve(), imports) or failed
    return not failed


def main() -> int:
    sources = [Path(a) for a in sys.argv[1:]] or [LAYERED_SRC]
    results = [check(src) for src in sources]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
