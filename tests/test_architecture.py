"""The import graph of omldm's own modules (DESIGN.md, layers): no circles, and no PyFlink
below the Flink hosts.

Every project ``.py`` file is parsed with :mod:`ast` (nothing is imported), and every
``import`` / ``from … import`` of a project module is collected, at module level and inside
functions and classes alike: a function-level import that closes a circle is still a circle,
only hidden until the function first runs. ``from package import name`` counts as an import
of ``package.name`` when that is a module, else of ``package``. A package's ``__init__`` is
a module of its own, imported only when named (as import linters do: importing
``a.b`` runs ``a/__init__.py`` too, but Python tolerates that partial import).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the project's top-level packages (``benchmarks/`` is a folder of scripts, no __init__)
PACKAGES = ("learning", "middleware", "operators", "flink_jobs", "deploy", "benchmarks")

#: The thin Flink hosts of the kernels (``operators/spoke_kernel.py``, ``hub_kernel.py``) and of
#: the sharders (``operators/sharding.py``): the only modules of ``operators/`` that may
#: import PyFlink.
FLINK_HOSTS: frozenset[str] = frozenset({"operators/spoke.py", "operators/hub.py",
                                         "operators/shard.py"})

#: Modules that must run without PyFlink installed (DESIGN.md: "middleware knows nothing of
#: Flink"; the kernels are plain Python, hosted by Flink or by the in-process kernel).
KERNEL_MODULES: list[str] = sorted(
    [p.relative_to(ROOT).as_posix() for p in (ROOT / "middleware").glob("*.py")]
    + [p.relative_to(ROOT).as_posix() for p in (ROOT / "operators").glob("*.py")
       if p.relative_to(ROOT).as_posix() not in FLINK_HOSTS])


# -- the graph -------------------------------------------------------------------------------
def module_name(path: Path, root: Path) -> str:
    """``learning/protocols/base.py`` → ``learning.protocols.base``; a package's
    ``__init__.py`` → the package's name."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Module name → file, for every ``.py`` file under ``packages`` of ``root``."""
    return {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))
            if "__pycache__" not in p.parts}


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolve(target: str, modules: dict[str, Path]) -> str | None:
    """The deepest project module that ``target`` (a dotted name) names, or None."""
    parts = target.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in modules:
            return name
    return None


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The project modules that module ``name`` (file ``path``) imports, anywhere in the file,
    each with the line of its first import.

    Relative imports are resolved against ``name``'s package; in a folder of scripts (no
    ``__init__.py``) a bare ``import sibling`` names the sibling script, as it does when the
    script runs from its folder.
    """
    package = name if _is_package(path) else name.rpartition(".")[0]
    script_dir = not (path.parent / "__init__.py").exists()
    tops = {m.split(".")[0] for m in modules}
    found: dict[str, int] = {}

    def add(target: str | None, line: int) -> None:
        if target is not None and target != name:
            found.setdefault(target, line)

    def absolute(dotted: str) -> str:
        if script_dir and package and dotted.split(".")[0] not in tops:
            return f"{package}.{dotted}"
        return dotted

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(_resolve(absolute(alias.name), modules), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = absolute(node.module or "")
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                add(sub if sub in modules else _resolve(source, modules), node.lineno)
    return found


def import_graph(root: Path = ROOT,
                 packages: tuple[str, ...] = PACKAGES) -> dict[str, dict[str, int]]:
    """Module → {imported project module: line}, for every project module."""
    modules = project_modules(root, packages)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One shortest circle through each strongly connected component of ``graph`` that has
    one, as ``[a, b, …, a]``; sorted, empty when the graph is acyclic (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)

    found = []
    for component in components:
        start = min(component)
        paths = {start: [start]}  # breadth first: the shortest way back to start
        frontier = [start]
        while frontier and start not in [w for v in frontier for w in graph[v]]:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w in component and w not in paths:
                        paths[w] = paths[v] + [w]
                        nxt.append(w)
            frontier = nxt
        last = next(v for v in frontier if start in graph[v])
        found.append(paths[last] + [start])
    return sorted(found)


def describe(cycle: list[str], graph: dict[str, dict[str, int]], modules: dict[str, Path]) -> str:
    """``a (a.py:12) → b (b.py:40) → a``: each step with the line that imports the next."""
    steps = [f"{a} ({modules[a].relative_to(ROOT).as_posix()}:{graph[a][b]})"
             for a, b in zip(cycle, cycle[1:])]
    return " → ".join(steps + [cycle[-1]])


# -- the checks ------------------------------------------------------------------------------
def test_no_import_cycle_among_project_modules():
    graph = import_graph()
    found = cycles(graph)
    modules = project_modules()
    assert not found, "import cycles (module or function level):\n" + "\n".join(
        describe(c, graph, modules) for c in found)


def _pyflink_lines(path: Path) -> list[int]:
    """Lines of ``path`` that import PyFlink (module or function level)."""
    tree = ast.parse(path.read_text(), str(path))
    return sorted({node.lineno for node in ast.walk(tree)
                   if isinstance(node, ast.Import) and any(
                       a.name.split(".")[0] == "pyflink" for a in node.names)
                   or isinstance(node, ast.ImportFrom) and not node.level
                   and (node.module or "").split(".")[0] == "pyflink"})


def test_no_kernel_module_imports_pyflink():
    """Not directly, and not through any project module it imports (transitively)."""
    graph, modules = import_graph(), project_modules()
    flink = {name for name, path in modules.items() if _pyflink_lines(path)}
    offenders = {}
    for path in KERNEL_MODULES:
        start = module_name(ROOT / path, ROOT)
        seen, frontier, via = {start}, [start], {start: [start]}
        while frontier:
            nxt = []
            for v in frontier:
                for w in graph.get(v, {}):
                    if w not in seen:
                        seen.add(w)
                        via[w] = via[v] + [w]
                        nxt.append(w)
            frontier = nxt
        reached = sorted(seen & flink)
        if reached:
            offenders[path] = [" → ".join(via[m]) for m in reached]
    assert not offenders, (f"kernel modules reach pyflink (through): {offenders}; only the "
                           f"Flink hosts {sorted(FLINK_HOSTS)} may")


def test_kernel_modules_cover_middleware_and_operators():
    assert "middleware/node.py" in KERNEL_MODULES and "operators/local.py" in KERNEL_MODULES
    assert not FLINK_HOSTS & set(KERNEL_MODULES)
    assert all(p.startswith(("middleware/", "operators/")) for p in KERNEL_MODULES)


# -- the checker, on a made-up project -------------------------------------------------------
def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_a_function_level_import_of_a_submodule_closes_a_cycle(tmp_path):
    write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import thing\n",
        "pkg/b.py": "def thing():\n    from pkg import c\n    return c\n",
        "pkg/c.py": "import os\nfrom . import a\n",
        "pkg/d.py": "from pkg.a import thing\n",  # into the circle, not part of it
    })
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.b"] == {"pkg.c": 2} and graph["pkg.c"] == {"pkg.a": 2}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]


def test_names_from_a_package_are_imports_of_the_package(tmp_path):
    write(tmp_path, {
        "pkg/__init__.py": "from pkg.sub.x import X\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/x.py": "X = 1\n",
        "pkg/sub/y.py": "from .. import X\nfrom .x import X as Y\nimport pkg.sub.x\n",
        "scripts/run.py": "from helper import go\n",
        "scripts/helper.py": "import json\n",
    })
    graph = import_graph(tmp_path, ("pkg", "scripts"))
    assert graph["pkg.sub.y"] == {"pkg": 1, "pkg.sub.x": 2}
    assert graph["scripts.run"] == {"scripts.helper": 1}
    assert cycles(graph) == []
