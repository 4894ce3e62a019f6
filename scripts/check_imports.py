#!/usr/bin/env python3
"""Check that the imports of hoodie_stream/ follow the data path: no package-level import circle, and every import
points down the layers (a module may import its own package and any lower layer, never a higher one, nor a sibling
of its own layer unless ALLOWED lists the pair).

Nodes are the package's subpackages and its top-level modules; imports are read with `ast` (absolute and relative,
at module level and inside functions alike, since a lazy import is still a dependency). A subpackage named in
SUB_LAYERS is checked the same way inside: its own subpackages and modules are nodes with layers of their own.

    python scripts/check_imports.py [--graph]

Exits 1 with the offending imports (file:line, the import, why), 0 otherwise. --graph prints the package graph.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "hoodie_stream"

# bottom to top; a node may import any node of a lower layer
LAYERS: list[tuple[str, ...]] = [
    ("errors",),
    ("storage",),
    ("format",),
    ("options", "chain"),
    ("checkpoints",),
    ("bucket_assign", "compaction"),
    ("streaming_sink",),
    ("debezium", "spark"),
    ("notebook",),
    ("__init__", "demo"),
    ("cli",),
    ("__main__",),
]
# inside these subpackages, their own subpackages and modules have layers too (bottom to top), with the same rules
SUB_LAYERS: dict[str, list[tuple[str, ...]]] = {
    "format": [
        ("util",),
        ("avro",),
        ("record",),
        ("table",),
        ("base_file",),
        ("log_file",),
        ("timeline",),
        ("file_group",),
        ("read",),
        ("cdc",),
        ("views", "write"),
        ("__init__", "hoodie_table"),
    ],
}
# imports allowed between two nodes of one layer: (importer, imported)
ALLOWED: set[tuple[str, str]] = set()
# leaves: import nothing of the package; any node may import them
LEAVES = {"local_spark"}

LAYER_OF = {node: i for i, nodes in enumerate(LAYERS) for node in nodes}


class Import(NamedTuple):
    path: Path  # importing file
    line: int
    source: str  # importing node
    target: str  # imported node
    text: str  # the import statement, as written
    source_module: str = ""  # the dotted modules, for the layers inside a subpackage
    target_module: str = ""


def package_dir(root: Path = ROOT) -> Path:
    return root / PACKAGE


def node_of(module: str, depth: int = 1) -> str:
    """Node of a dotted module name inside the package ("hoodie_stream.format.timeline.instant" -> "format"); with
    depth 2, the node inside that subpackage ("timeline"; "__init__" for the subpackage itself)."""
    parts = module.split(".")
    return "__init__" if len(parts) <= depth else parts[depth]


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}"


def module_name(path: Path, pkg: Path) -> tuple[str, bool]:
    """Dotted name of a file of the package, and whether it is a package's __init__."""
    rel = path.relative_to(pkg.parent).with_suffix("")
    parts = list(rel.parts)
    is_init = parts[-1] == "__init__"
    if is_init:
        parts = parts[:-1]
    return ".".join(parts), is_init


def _is_submodule(dotted: str, pkg: Path) -> bool:
    """Whether `dotted` (inside the package) names a module or subpackage on disk."""
    rel = Path(*dotted.split(".")[1:]) if "." in dotted else Path()
    target = pkg / rel
    return target.with_suffix(".py").is_file() or (target / "__init__.py").is_file()


def imports_of(path: Path, pkg: Path) -> list[Import]:
    source_text = path.read_text(encoding="utf-8")
    tree = ast.parse(source_text, filename=str(path))
    lines = source_text.splitlines()
    module, is_init = module_name(path, pkg)
    # the package a relative import starts from: a module's own package, or the package an __init__ defines
    here = module if is_init else module.rpartition(".")[0]
    source = node_of(module)
    found: list[Import] = []

    def add(node: ast.stmt, target_module: str) -> None:
        text = " ".join(lines[node.lineno - 1].split())  # the statement's first line
        found.append(Import(path, node.lineno, source, node_of(target_module), text, module, target_module))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    add(node, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = here.split(".")
                if node.level > 1:
                    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts)
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if target != PACKAGE and not target.startswith(PACKAGE + "."):
                continue
            if target == PACKAGE:
                # `from hoodie_stream import x`: the subpackage/module x, or a name __init__ defines
                for alias in node.names:
                    sub = f"{PACKAGE}.{alias.name}"
                    add(node, sub if _is_submodule(sub, pkg) else PACKAGE)
            else:
                add(node, target)
    return found


def all_imports(pkg: Path) -> list[Import]:
    out: list[Import] = []
    for path in sorted(pkg.rglob("*.py")):
        out += imports_of(path, pkg)
    return out


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (or a node importing itself), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    nodes = set(edges) | {w for ws in edges.values() for w in ws}
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return sorted(out)


def violations(imports: list[Import]) -> list[str]:
    """What breaks the layers: of the package's nodes, then inside each subpackage of SUB_LAYERS."""
    problems = layer_violations(imports, LAYER_OF, ALLOWED, LEAVES, "")
    for sub, layers in SUB_LAYERS.items():
        inside = [
            imp._replace(source=node_of(imp.source_module, 2), target=node_of(imp.target_module, 2))
            for imp in imports
            if imp.source == sub and imp.target == sub
        ]
        layer_of = {node: i for i, nodes in enumerate(layers) for node in nodes}
        problems += layer_violations(inside, layer_of, set(), set(), f"{PACKAGE}.{sub}: ")
    return problems


def layer_violations(
    imports: list[Import], layer_of: dict[str, int], allowed: set[tuple[str, str]], leaves: set[str], scope: str
) -> list[str]:
    problems: list[str] = []
    edges: dict[str, set[str]] = defaultdict(set)
    for imp in imports:
        if imp.source == imp.target:
            continue
        edges[imp.source].add(imp.target)
    for imp in imports:
        where = _where(imp.path, imp.line)
        s, t = imp.source, imp.target
        if s == t:
            continue
        if s in leaves:
            problems.append(f"{where}: {scope}{s} -> {t} ({imp.text}): {s} is a leaf and imports nothing of {PACKAGE}")
            continue
        if t in leaves:
            continue
        for node in (s, t):
            if node not in layer_of:
                problems.append(
                    f"{where}: {scope}{s} -> {t} ({imp.text}): {node} has no layer in scripts/check_imports.py"
                )
                break
        else:
            if layer_of[t] > layer_of[s]:
                problems.append(
                    f"{where}: {scope}{s} -> {t} ({imp.text}): {t} is above {s} (imports flow down the layers)"
                )
            elif layer_of[t] == layer_of[s] and (s, t) not in allowed:
                problems.append(f"{where}: {scope}{s} -> {t} ({imp.text}): {s} and {t} are siblings of one layer")
    for cycle in _cycles(edges):
        members = set(cycle)
        sites = sorted(
            f"{_where(imp.path, imp.line)} {imp.source} -> {imp.target}"
            for imp in imports
            if imp.source in members and imp.target in members and imp.source != imp.target
        )
        problems.append(f"{scope}import circle between {', '.join(cycle)}: " + "; ".join(sites))
    return problems


def graph(imports: list[Import]) -> str:
    out = [_graph(imports, [n for layer in LAYERS for n in layer] + sorted(LEAVES))]
    for sub, layers in SUB_LAYERS.items():
        inside = [
            imp._replace(source=node_of(imp.source_module, 2), target=node_of(imp.target_module, 2))
            for imp in imports
            if imp.source == sub and imp.target == sub
        ]
        out.append(f"\ninside {sub}:\n" + _graph(inside, [n for layer in layers for n in layer]))
    return "\n".join(out)


def _graph(imports: list[Import], order: list[str]) -> str:
    edges: dict[str, set[str]] = defaultdict(set)
    for imp in imports:
        if imp.source != imp.target:
            edges[imp.source].add(imp.target)
    order = order + sorted(set(edges) - set(order))
    return "\n".join(f"{n:15s} -> {', '.join(sorted(edges[n], key=order.index)) or '-'}" for n in order)


def main(argv: list[str] | None = None, pkg: Path | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graph", action="store_true", help="print the package graph")
    args = parser.parse_args(argv)
    imports = all_imports(pkg or package_dir())
    if args.graph:
        print(graph(imports))
    problems = violations(imports)
    if problems:
        print(f"{len(problems)} import(s) against the layers of {PACKAGE}:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    print(f"imports of {PACKAGE} follow the layers ({len(imports)} imports checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
