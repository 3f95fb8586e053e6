"""The package's module map: lines per module, the import graph's cycles and upward arrows, the longest classes
and functions. ``python bench/module_map.py [--json OUT]``; ``tests/test_layout.py`` checks the graph.

Every import counts, at module level or inside a function (a lazy import is still a dependency). A module's
group is its top-level module or subpackage (``autosched.graph``, ``autosched.api``); ``LAYERS`` orders the
groups from the bottom up, and an arrow from a group to one in a higher layer is an upward arrow.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "autosched"

# From the bottom up: a group may import groups of its own layer or below (without a cycle), never above.
LAYERS: list[set[str]] = [
    {"version", "errors", "paths", "_tvm", "timing", "native_log", "config", "bandwidth", "masking", "bounded",
     "scratch"},
    {"targets", "workloads", "records"},
    {"tasks", "db"},
    {"codegen"},
    {"spaces"},
    {"apply", "cost", "measure"},
    {"search", "testing"},
    {"tune"},
    {"parts"},  # the parts a user may plug in as objects (sampler, runner, builder, cost model, callbacks)
    {"session"},
    {"graph"},
    {"scheduler"},
    {"deploy"},
    {"corpus"},
    {"report", "report_html", "doctor"},
    {"api"},
    {"torch_mutations"},
    {"programs", "torch_backend"},
    {"family_example"},
    {"cli"},
    {""},  # the package itself (autosched/__init__.py: the public API)
]


@dataclass
class ModuleMap:
    lines: dict[str, int] = field(default_factory=dict)  # module -> lines
    imports: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # module -> modules it imports
    sizes: list[tuple[int, str]] = field(default_factory=list)  # (lines, "module:Class" or "module:function")

    def cycles(self) -> list[list[str]]:
        """Strongly connected components of more than one module (each a cycle of imports)."""
        return _components(self.lines, self.imports)

    def group_imports(self) -> dict[str, set[str]]:
        groups: dict[str, set[str]] = defaultdict(set)
        for a, targets in self.imports.items():
            for b in targets:
                if group(a) != group(b):
                    groups[group(a)].add(group(b))
        return groups

    def group_cycles(self) -> list[list[str]]:
        groups = self.group_imports()
        return _components({group(m) for m in self.lines}, groups)

    def upward(self) -> list[tuple[str, str]]:
        """(importer, imported) where the imported module's group sits in a higher layer (or is not layered)."""
        arrows = []
        for a, targets in sorted(self.imports.items()):
            for b in sorted(targets):
                la, lb = layer(group(a)), layer(group(b))
                if group(a) != group(b) and (la is None or lb is None or lb > la):
                    arrows.append((a, b))
        return arrows


def group(module: str) -> str:
    """``autosched.graph.passes`` -> ``graph``; ``autosched.api`` -> ``api``; ``autosched`` -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer(name: str) -> int | None:
    return next((i for i, names in enumerate(LAYERS) if name in names), None)


def module_map(root: Path = ROOT / PACKAGE) -> ModuleMap:
    paths = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    found = ModuleMap()
    for name, path in paths.items():
        text = path.read_text()
        found.lines[name] = len(text.splitlines())
        tree = ast.parse(text)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        typing_only = {id(n) for block in ast.walk(tree) if _is_type_checking(block) for n in ast.walk(block)}
        for node in ast.walk(tree):
            for imported in [] if id(node) in typing_only else _imported(node, package):
                while imported and imported not in paths:
                    imported = imported.rpartition(".")[0]
                if imported and imported != name:
                    found.imports[name].add(imported)
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                found.sizes.append((node.end_lineno - node.lineno + 1, f"{name}:{node.name}"))
    found.sizes.sort(reverse=True)
    return found


def _module_name(path: Path, root: Path) -> str:
    parts = (root.name, *path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:``: imports for type hints only, never run."""
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _imported(node: ast.AST, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
    # ``from autosched.db import base`` imports the submodule; ``from autosched.db import open_database`` the package
    return [f"{base}.{a.name}" for a in node.names]


def _components(nodes, edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one node, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the map as JSON to this file")
    parser.add_argument("--top", type=int, default=15, help="how many of the longest classes and functions")
    args = parser.parse_args(argv)
    found = module_map()
    groups: dict[str, int] = defaultdict(int)
    for name, n in found.lines.items():
        groups[group(name) or "__init__"] += n
    print(f"{len(found.lines)} modules, {sum(found.lines.values())} lines")
    print("lines per group: " + ", ".join(f"{g} {n}" for g, n in sorted(groups.items(), key=lambda x: -x[1])))
    print("modules over 300 lines: " + ", ".join(f"{m} {n}" for m, n in sorted(found.lines.items(),
                                                                               key=lambda x: -x[1]) if n > 300))
    cycles, group_cycles, upward = found.cycles(), found.group_cycles(), found.upward()
    print(f"import cycles between modules: {len(cycles)}")
    for c in cycles:
        print("  " + " <-> ".join(c))
    print(f"import cycles between groups (top-level modules and packages): {len(group_cycles)}")
    for c in group_cycles:
        print("  " + " <-> ".join(g or "autosched" for g in c))
    print(f"upward or unlayered imports: {len(upward)}")
    for a, b in upward:
        print(f"  {a} -> {b}")
    print("longest classes and functions (lines):")
    for n, name in found.sizes[: args.top]:
        print(f"  {n:4d} {name}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "modules": found.lines, "cycles": cycles, "group_cycles": group_cycles, "upward": upward,
            "longest": found.sizes[: args.top]}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
